// `gradbox secret`: a new run secret (Note [Signed files] in wire/file_mac.h), for every member
// of a run to give as --run-secret-file or $GRADBOX_RUN_SECRET (a notebook's platform secret);
// with --member, one member's credential made from it (Note [Member signatures]).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

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
  auto* cmd = app.add_subcommand("secret", "Make a new run secret, which signs every file of a run (keep it out of the shared folder), "
                                           "or a member's credential from it");
  struct Flags {
    std::string out, member, run_secret_file;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--out", f->out, "Write it to this new file (mode 0600) instead of printing it");
  cmd->add_option("--member", f->member,
                  "Instead of a new secret: the credential of this worker name, made from the run secret, which lets "
                  "its holder write only as this name (Note [Member signatures]); give it to a volunteer in place of the secret");
  cmd->add_option("--run-secret-file", f->run_secret_file, "With --member: the run secret (default: $GRADBOX_RUN_SECRET)");
  cmd->callback([f] {
    std::string text;
    if (f->member.empty()) {
      GB_REQUIRE(f->run_secret_file.empty(), "--run-secret-file: only with --member");
      text = wire::RunSecret::generate().text();
    } else {
      GB_REQUIRE(f->member.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") ==
                         std::string::npos && f->member.size() <= 64,
                 "--member ", f->member, ": use letters, digits, '-' and '_' only (it is a worker name)");
      const std::optional<wire::RunSecret> secret = wire::RunSecret::find(
          f->run_secret_file.empty() ? std::nullopt : std::optional<std::filesystem::path>(f->run_secret_file));
      GB_REQUIRE(secret, "--member ", f->member, ": needs the run secret (--run-secret-file or $",
                 wire::RunSecret::kEnvironmentVariable, ")");
      text = wire::FileMac(*secret).issue_credential(f->member);
    }
    if (f->out.empty()) {
      std::cout << text << "\n";
      return;
    }
    write_new_secret(f->out, text);
    if (f->member.empty())
      std::cerr << "gradbox: wrote a new run secret to " << f->out
                << "; give every worker --run-secret-file (or $GRADBOX_RUN_SECRET), or each one its own "
                   "`gradbox secret --member NAME`\n";
    else
      std::cerr << "gradbox: wrote " << f->member << "'s credential to " << f->out << "; that worker runs as --worker "
                << f->member << " with it as --run-secret-file (or $GRADBOX_RUN_SECRET)\n";
  });
}

}  // namespace gradbox::cli
