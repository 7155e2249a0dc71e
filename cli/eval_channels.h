// kvscope eval key-channels: KIVI's observation measured on the model (arXiv 2402.02750): per
// layer, how far the largest key channel and the largest value channel stand out (mean |x| of the
// channel over the median channel), the top key channels, key_channels.csv with every layer x
// channel x kind, and key_channels.png for one layer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/checkpoint.h"

namespace kvscope::cli {

// `layer` < 0: the layer whose keys stand out most. Returns the exit code.
int run_key_channels(std::shared_ptr<const Model> model, Backend& backend,
                     const std::vector<std::vector<int>>& windows, const std::string& source,
                     int layer, const std::string& out_dir, bool json);

}  // namespace kvscope::cli
