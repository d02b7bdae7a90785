#include "executor/sequence_prefill.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace fathom::executor {

SequencePrefillResult prefill_sequence(ModelBackend& backend, const std::vector<int32_t>& ids,
                                       const std::vector<int32_t>& slots, const SequencePrefillOptions& options) {
  const int64_t count = static_cast<int64_t>(ids.size());
  FATHOM_CHECK(count > 0, "prefill: need at least one token id");
  FATHOM_CHECK(static_cast<int64_t>(slots.size()) >= count, "prefill: " << slots.size() << " KV slots for " << count << " tokens");
  FATHOM_CHECK(!options.with_mtp || backend.has_mtp(),
               "--mtp: the model has no MTP module (model.layers." << backend.config().num_hidden_layers << ".eh_proj.weight)");
  const int64_t step = options.chunk_size > 0 ? options.chunk_size : count;
  SequencePrefillResult result;
  for (int64_t begin = 0; begin < count; begin += step) {
    const int64_t end = std::min(count, begin + step);
    model::ForwardBatch batch;
    batch.attention_form = model::AttentionForm::kExpanded;
    batch.add_sequence(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end), begin, slots.data());
    std::vector<int64_t> rows;
    if (options.all_rows) {
      rows.resize(static_cast<size_t>(end - begin));
      std::iota(rows.begin(), rows.end(), 0);
    } else if (end == count) {
      rows.push_back(end - begin - 1);
    }
    const std::vector<float> chunk_logits = backend.forward(batch, rows);
    result.logits.insert(result.logits.end(), chunk_logits.begin(), chunk_logits.end());

    const int64_t mtp_end = std::min(end, count - 1);  // the last position has no next token
    if (!options.with_mtp || mtp_end <= begin) continue;
    model::ForwardBatch mtp_batch;
    mtp_batch.attention_form = model::AttentionForm::kExpanded;
    mtp_batch.add_sequence(std::vector<int32_t>(ids.begin() + begin + 1, ids.begin() + mtp_end + 1), begin, slots.data());
    std::vector<int64_t> mtp_rows(static_cast<size_t>(mtp_end - begin));  // chunk row i reads main row i
    std::iota(mtp_rows.begin(), mtp_rows.end(), 0);
    const std::vector<float> mtp_logits = backend.forward_mtp(mtp_batch, mtp_rows, mtp_rows);
    result.mtp_logits.insert(result.mtp_logits.end(), mtp_logits.begin(), mtp_logits.end());
  }
  return result;
}

}  // namespace fathom::executor
