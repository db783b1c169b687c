#pragma once
// Where one parameter lives in the flat buffers (Note [Flat parameters] in worker/flat_parameters.h).
#include <cstdint>
#include <string>
#include <vector>

namespace gradbox::worker {

struct ParameterSegment {
  std::string name;
  int64_t offset = 0;
  int64_t numel = 0;
  std::vector<int64_t> shape;
  bool decay = true;
};

}  // namespace gradbox::worker
