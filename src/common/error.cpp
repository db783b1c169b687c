#include "common/error.h"

namespace gradbox::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  throw std::logic_error(str(file, ":", line, ": check failed: ", cond, msg.empty() ? "" : ": ", msg));
}

}  // namespace gradbox::detail
