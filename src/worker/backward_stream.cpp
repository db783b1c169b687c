#include "worker/backward_stream.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <map>
#include <unordered_set>

#include "common/error.h"

namespace gradbox::worker {
namespace {

class PartReady final : public torch::autograd::PostAccumulateGradHook {
 public:
  PartReady(BackwardStream& stream, size_t part) : stream_(stream), part_(part) {}
  void operator()(const torch::autograd::Variable&) override { stream_.ready(part_); }

 private:
  BackwardStream& stream_;
  size_t part_;
};

}  // namespace

BackwardStream::BackwardStream(torch::nn::Module& model, const FlatParameters& flat) {
  const std::vector<ParameterSegment>& segments = flat.segments();
  // Each group from its last parameter to its first (segments are grouped: decayed first).
  std::vector<size_t> order;
  for (bool decay : {true, false})
    for (size_t i = segments.size(); i-- > 0;)
      if (segments[i].decay == decay) order.push_back(i);
  std::map<std::string, size_t> part_of;
  for (size_t part = 0; part < order.size(); ++part) {
    const ParameterSegment& s = segments[order[part]];
    parts_.push_back({static_cast<size_t>(s.offset), static_cast<size_t>(s.offset + s.numel)});
    part_of[s.name] = part;
  }
  // The same walk FlatParameters made: a tied weight is hooked once, under its first name.
  std::unordered_set<const void*> seen;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    auto it = part_of.find(item.key());
    GB_CHECK(it != part_of.end(), "parameter ", item.key(), " is not in the flat buffers");
    torch::autograd::impl::set_post_acc_grad_hooks(p, std::make_unique<PartReady>(*this, it->second));
    hooked_.push_back(p);
  }
  GB_CHECK(hooked_.size() == parts_.size(), "the model has ", hooked_.size(), " parameters, the flat buffers ",
           parts_.size());
}

BackwardStream::~BackwardStream() {
  for (const torch::Tensor& p : hooked_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

}  // namespace gradbox::worker
