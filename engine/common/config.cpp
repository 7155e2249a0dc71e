// ModelConfig helpers.
#include "engine/common/config.h"

#include <sstream>

namespace kvscope {

std::int64_t ModelConfig::num_params() const {
  const std::int64_t d = dim, h = hidden_dim, L = n_layers, v = vocab_size, kv = kv_dim(),
                     q = q_dim();
  std::int64_t per_layer = d /*rms_att*/ + q * d /*wq*/ + 2 * kv * d /*wk,wv*/ + d * q /*wo*/ +
                           d /*rms_ffn*/ + 3 * h * d /*w1,w2,w3*/;
  std::int64_t total = v * d + L * per_layer + d;
  if (!shared_classifier) total += v * d;
  return total;
}

std::string ModelConfig::describe() const {
  std::ostringstream os;
  os << "dim " << dim << ", hidden " << hidden_dim << ", layers " << n_layers << ", heads "
     << n_heads << ", kv_heads " << n_kv_heads << " (head_dim " << head_dim() << "), vocab "
     << vocab_size << ", seq_len " << seq_len
     << (shared_classifier ? ", shared classifier" : ", separate classifier");
  return os.str();
}

}  // namespace kvscope
