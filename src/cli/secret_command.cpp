// `gradbox secret`: a new run secret (Note [Signed files] in wire/file_mac.h), for every member
// of a run to give as --run-secret-file or $GRADBOX_RUN_SECRET (a notebook's platform secret).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "common/error.h"
#include "wire/file_mac.h"

namespace gradbox::cli {
namespace {

// Created only if absent and readable by its owner alone: a secret is never overwritten.
void write_new_secret(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw InputError(str("--out ", path, ": ", errno == EEXIST ? "already exists (a secret is never overwritten)"
                                                               : std::strerror(errno)));
  const std::string line = text + "\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const bool closed = ::close(fd) == 0;
  if (!written || !closed) {
    const int error = errno;
    ::unlink(path.c_str());
    throw InputError(str("--out ", path, ": cannot write: ", std::strerror(error)));
  }
}

}  // namespace

void add_secret_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("secret", "Make a new run secret, which signs every file of a run (keep it out of the shared folder)");
  auto out = std::make_shared<std::string>();
  cmd->add_option("--out", *out, "Write it to this new file (mode 0600) instead of printing it");
  cmd->callback([out] {
    const wire::RunSecret secret = wire::RunSecret::generate();
    if (out->empty()) {
      std::cout << secret.text() << "\n";
      return;
    }
    write_new_secret(*out, secret.text());
    std::cerr << "gradbox: wrote a new run secret to " << *out
              << "; give every worker --run-secret-file (or $GRADBOX_RUN_SECRET)\n";
  });
}

}  // namespace gradbox::cli
