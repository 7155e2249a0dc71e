// Loading a scenario's model: weights and tokenizer, or only the shape for bookkeeping runs.
#include "engine/common/error.h"
#include "engine/model/locate.h"
#include "engine/model/synthetic.h"
#include "engine/scenario/scenario.h"

namespace kvscope {

ScenarioModelLoad load_scenario_model(const Scenario& s, const std::string& model_override,
                                      bool bookkeeping, WeightFormat format) {
  const std::string arg = model_override.empty() ? s.model.arg : model_override;
  ScenarioModelLoad out;
  out.random_weights = is_synthetic_model_arg(arg);
  if (!(bookkeeping || s.model.bookkeeping) || !out.random_weights) {
    LoadedModel loaded = load_model(arg, "", WeightStorage::kMapped, format);
    out.shape = loaded.model->config();
    out.tokenizer = loaded.tokenizer;
    out.random_weights = loaded.model->is_random_weights();
    out.source = loaded.model->source();
    if (!(bookkeeping || s.model.bookkeeping)) out.weights = loaded.model;
    return out;
  }
  // A synthetic shape without weights (Llama-3-70B would need 140 GB of them).
  out.shape = model_config_for(arg, &out.source);
  try {
    const std::string tok = locate_tokenizer("", "", out.shape.vocab_size);
    out.tokenizer = std::make_shared<Llama2cTokenizer>(tok, out.shape.vocab_size);
  } catch (const Error&) {
    // No tokenizer of this vocabulary: requests must give token ids (resolve says so).
  }
  return out;
}

}  // namespace kvscope
