#include "worker/flat_parameters.h"

#include <unordered_set>

#include "common/error.h"

namespace gradbox::worker {

FlatParameters::FlatParameters(torch::nn::Module& model,
                               const std::function<bool(const std::string&)>& is_no_decay) {
  // Tied weights appear once: the first name wins.
  std::vector<std::pair<std::string, torch::Tensor>> decayed, not_decayed;
  std::unordered_set<const void*> seen;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    GB_CHECK(p.scalar_type() == torch::kFloat32, "parameter ", item.key(), " is ", p.scalar_type(),
             ": master weights must be fp32");
    (is_no_decay(item.key()) ? not_decayed : decayed).emplace_back(item.key(), p);
  }
  GB_CHECK(!decayed.empty() || !not_decayed.empty(), "model has no trainable parameters");
  const torch::Device device = (decayed.empty() ? not_decayed : decayed).front().second.device();

  int64_t total = 0;
  for (auto* group : {&decayed, &not_decayed})
    for (const auto& [name, p] : *group) {
      GB_CHECK(p.device() == device, "parameter ", name, " is on ", p.device(), ", others on ", device);
      segments_.push_back({name, total, p.numel(), p.sizes().vec(), group == &decayed});
      total += p.numel();
    }
  decay_numel_ = 0;
  for (const auto& s : segments_)
    if (s.decay) decay_numel_ += s.numel;

  auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  params_ = torch::empty({total}, options);
  grads_ = torch::zeros({total}, options);
  torch::NoGradGuard no_grad;
  size_t index = 0;
  for (auto* group : {&decayed, &not_decayed})
    for (auto& [name, p] : *group) {
      const ParameterSegment& s = segments_[index++];
      torch::Tensor view = params_.narrow(0, s.offset, s.numel).view(s.shape);
      view.copy_(p);
      p.set_data(view);
      // Autograd accumulates into an existing .grad in place, so gradients land in grads_.
      p.mutable_grad() = grads_.narrow(0, s.offset, s.numel).view(s.shape);
    }
}

}  // namespace gradbox::worker
