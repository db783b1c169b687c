#include "syncer/backend.h"

#include "common/error.h"

namespace gradbox::syncer {

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
