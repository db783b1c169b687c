#include "model/attention.h"

#include <ATen/SDPBackend.h>

#include "common/error.h"

namespace gradbox::model {

namespace {

// (B, nkv, T, hs) -> (B, nkv*groups, T, hs), each kv head repeated for its group of query
// heads (the same order as repeat_interleave on dim 1, and as HF's repeat_kv).
torch::Tensor repeat_kv(const torch::Tensor& x, int64_t groups) {
  const auto B = x.size(0), nkv = x.size(1), T = x.size(2), hs = x.size(3);
  return x.unsqueeze(2).expand({B, nkv, groups, T, hs}).reshape({B, nkv * groups, T, hs});
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double dropout_p) {
  GB_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q ", q.sizes(), " k ", k.sizes(),
           " v ", v.sizes());
  const int64_t nh = q.size(1), nkv = k.size(1);
  GB_CHECK(nkv > 0 && nh % nkv == 0 && v.size(1) == nkv, "heads: q ", nh, " k ", nkv, " v ",
           v.size(1));
  if (nkv == nh) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p,
                                            /*is_causal=*/true);
  }
  // Grouped-query attention. Only some kernels take fewer kv heads (flash and cuDNN do; the
  // memory-efficient one, which T4s use, and the CPU flash kernel do not, and then torch falls
  // back to the slow math kernel). Ask torch which kernel it would pick with enable_gqa; where
  // that is not a fused one, repeat the kv heads ourselves so a fused kernel can still run.
  const auto choice = static_cast<at::SDPBackend>(at::_fused_sdp_choice(
      q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true, /*scale=*/std::nullopt,
      /*enable_gqa=*/true));
  if (choice == at::SDPBackend::flash_attention || choice == at::SDPBackend::cudnn_attention) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p,
                                            /*is_causal=*/true, /*scale=*/std::nullopt,
                                            /*enable_gqa=*/true);
  }
  const int64_t groups = nh / nkv;
  return at::scaled_dot_product_attention(q, repeat_kv(k, groups), repeat_kv(v, groups),
                                          /*attn_mask=*/{}, dropout_p, /*is_causal=*/true);
}

}  // namespace gradbox::model
