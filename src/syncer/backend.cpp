#include "syncer/backend.h"

#include "common/error.h"

namespace gradbox::syncer {

const char* entry_kind_name(RemoteEntry::Kind kind) {
  switch (kind) {
    case RemoteEntry::Kind::file: return "a file";
    case RemoteEntry::Kind::link: return "a symbolic link";
    case RemoteEntry::Kind::directory: return "a directory";
    case RemoteEntry::Kind::other: return "a special file (fifo, socket or device)";
  }
  return "?";
}

std::string parent_rel(const std::string& rel) {
  auto slash = rel.rfind('/');
  return slash == std::string::npos ? std::string() : rel.substr(0, slash);
}

void check_rel(const std::string& rel) {
  if (rel.empty() || rel.front() == '/') throw BackendError(str("bad relative path '", rel, "'"));
  for (const auto& part : fs::path(rel)) {
    if (part == ".." || part == ".") throw BackendError(str("bad relative path '", rel, "'"));
  }
}

}  // namespace gradbox::syncer
