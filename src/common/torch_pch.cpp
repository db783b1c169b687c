// Anchor for the shared precompiled header of <torch/torch.h>.
