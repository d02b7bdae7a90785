#pragma once
// The persistent MLA prefill kernel's work items and the order its CTAs take them in. Plain integer arithmetic for
// the host and the device (no CUDA headers), so the order is tested on the CPU: every item exactly once, whatever the
// CTA count.
//
// An item is 128 queries (one query tile) of one sequence and one head. Items run in sequence order, then blocks of
// head_block heads, then query tiles from the last (the most causal key tiles) to the first, then the heads of the
// block: items that run at the same time share a few heads' keys and values in L2 (a round of one query tile over all
// heads read every head's: 10% slower at 4096 tokens on an H200). CTA c takes item c of round 0, then snakes (round r:
// item r * ctas + c for even r, r * ctas + ctas - 1 - c for odd r), which pairs heavy items with light ones.
#if defined(__CUDACC__)
#define FATHOM_PREFILL_ITEMS_FN __host__ __device__ __forceinline__
#else
#define FATHOM_PREFILL_ITEMS_FN inline
#endif

namespace fathom::kernels::cuda::mla_detail {

struct PrefillItemCoords {
  int sequence, head, q_tile;  // q_tile: the item's queries are q_tile * 128 .. + 127 of the sequence
};

struct PrefillItemOrder {
  int num_q_tiles, batch, num_heads, head_block;  // all >= 1

  FATHOM_PREFILL_ITEMS_FN int num_items() const { return num_q_tiles * num_heads * batch; }

  // The item CTA `cta` of `ctas` takes in `round`; -1: none in this round (nor in any later one).
  FATHOM_PREFILL_ITEMS_FN int index(int round, int ctas, int cta) const {
    const int i = round * ctas + ((round & 1) ? ctas - 1 - cta : cta);
    return i < num_items() ? i : -1;
  }

  // index in [0, num_items())
  FATHOM_PREFILL_ITEMS_FN PrefillItemCoords coords(int index) const {
    const int seq_items = num_q_tiles * num_heads, block_items = num_q_tiles * head_block;
    const int in_seq = index % seq_items, block = in_seq / block_items, in_block = in_seq % block_items;
    const int rest = num_heads - block * head_block;
    const int block_heads = head_block < rest ? head_block : rest;  // the last block may have fewer
    return {index / seq_items, block * head_block + in_block % block_heads, num_q_tiles - 1 - in_block / block_heads};
  }
};

}  // namespace fathom::kernels::cuda::mla_detail

#undef FATHOM_PREFILL_ITEMS_FN
