// Precompiled header: the heavy LibTorch headers most translation units include.
#pragma once
#include <torch/torch.h>
