#include "kernels/cuda/mla/mla_prepare.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/norm/bf16x8.cuh"
#include "kernels/cuda/rope/rope_cos_sin.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

// rms_norm_bf16's single-pass configuration (norm/rms_norm.cu: kSmallVectors, kSmallMaxThreads). The latent norm
// reproduces its bits only with the same per-thread vectors and the same block size for dim = kv_lora: a thread's
// fmaf chain, the xor tree of each warp and the order of the warp partials all follow from them.
constexpr int kNormVectors = 4;
constexpr int kNormMaxThreads = 512;
constexpr int64_t kMaxKvLora = int64_t{kNormMaxThreads} * kNormVectors * kBf16PerVector;  // 16384

constexpr int kMinThreads = 128;  // blocks are max(kMinThreads, the norm's block size) threads
constexpr int kMaxThreads = kNormMaxThreads;
constexpr int kMaxRopeDim = 256;
// q items per thread: a q block loads all of its items before the cos/sin barrier, so up to kMaxQItems 16-byte loads
// per thread are in flight. Few tokens: one item per thread, the heads spread over more blocks (latency); many
// tokens: kMaxQItems per thread, fewer blocks (each one's position, cos/sin and barrier amortised).
constexpr int kMaxQItems = 4;
constexpr int kFewTokens = 64;

// How a rope vector is cut into items (one thread's unit of work). The 16-byte forms need rope_dim % 8 == 0
// (interleaved) or (rope_dim / 2) % 8 == 0 (split halves) and 16-byte aligned rows; kPair is the general fallback.
// Every form rotates each pair with rope_rotate and the same cos/sin, so all give the same bits.
enum class RopeAccess { kInterleaved8, kSplit8, kPair };

template <RopeAccess kAccess>
struct RopeItem;

// Item c: values [8c, 8c + 8) of an interleaved vector = pairs 4c .. 4c + 3, one 16-byte access.
template <>
struct RopeItem<RopeAccess::kInterleaved8> {
  uint4 v;
  __host__ __device__ static int per_vector(int rope_dim) { return rope_dim / 8; }
  __device__ __forceinline__ void load(const __nv_bfloat16* vec, int c, int /*half*/, bool /*interleaved*/) {
    v = *reinterpret_cast<const uint4*>(vec + 8 * c);
  }
  __device__ __forceinline__ void rotate(int c, const float* cos_shared, const float* sin_shared) {
    float x[8];
    unpack_bf16x8(v, x);
#pragma unroll
    for (int j = 0; j < 4; ++j) rope_rotate(x[2 * j], x[2 * j + 1], cos_shared[4 * c + j], sin_shared[4 * c + j]);
    v = pack_bf16x8(x);
  }
  __device__ __forceinline__ void store(__nv_bfloat16* vec, int c, int /*half*/, bool /*interleaved*/) const {
    *reinterpret_cast<uint4*>(vec + 8 * c) = v;
  }
};

// Item c: pairs 8c .. 8c + 7 of a split-half vector, values [8c, 8c + 8) of each half (two 16-byte accesses).
template <>
struct RopeItem<RopeAccess::kSplit8> {
  uint4 a, b;
  __host__ __device__ static int per_vector(int rope_dim) { return rope_dim / 16; }
  __device__ __forceinline__ void load(const __nv_bfloat16* vec, int c, int half, bool /*interleaved*/) {
    a = *reinterpret_cast<const uint4*>(vec + 8 * c);
    b = *reinterpret_cast<const uint4*>(vec + half + 8 * c);
  }
  __device__ __forceinline__ void rotate(int c, const float* cos_shared, const float* sin_shared) {
    float x[8], y[8];
    unpack_bf16x8(a, x);
    unpack_bf16x8(b, y);
#pragma unroll
    for (int j = 0; j < 8; ++j) rope_rotate(x[j], y[j], cos_shared[8 * c + j], sin_shared[8 * c + j]);
    a = pack_bf16x8(x);
    b = pack_bf16x8(y);
  }
  __device__ __forceinline__ void store(__nv_bfloat16* vec, int c, int half, bool /*interleaved*/) const {
    *reinterpret_cast<uint4*>(vec + 8 * c) = a;
    *reinterpret_cast<uint4*>(vec + half + 8 * c) = b;
  }
};

// Item i: pair i alone, scalar accesses (any even rope_dim, any alignment).
template <>
struct RopeItem<RopeAccess::kPair> {
  float a, b;
  __host__ __device__ static int per_vector(int rope_dim) { return rope_dim / 2; }
  __device__ __forceinline__ static int first(int i, bool interleaved) { return interleaved ? 2 * i : i; }
  __device__ __forceinline__ static int second(int i, int half, bool interleaved) {
    return interleaved ? 2 * i + 1 : i + half;
  }
  __device__ __forceinline__ void load(const __nv_bfloat16* vec, int i, int half, bool interleaved) {
    a = __bfloat162float(vec[first(i, interleaved)]);
    b = __bfloat162float(vec[second(i, half, interleaved)]);
  }
  __device__ __forceinline__ void rotate(int i, const float* cos_shared, const float* sin_shared) {
    rope_rotate(a, b, cos_shared[i], sin_shared[i]);
  }
  __device__ __forceinline__ void store(__nv_bfloat16* vec, int i, int half, bool interleaved) const {
    vec[first(i, interleaved)] = __float2bfloat16_rn(a);
    vec[second(i, half, interleaved)] = __float2bfloat16_rn(b);
  }
};

// The token's cos/sin into shared memory (table or double sincos). The 16-byte forms call it after issuing their
// row loads, so the loads and the position -> table chain overlap; kPair (odd shapes only) calls it before them: a
// double sincos is a real call, and rows held across it spill.
__device__ __forceinline__ void fill_cos_sin(const RopeParams& rope, int32_t position, float* cos_shared,
                                             float* sin_shared) {
  for (int i = threadIdx.x; i < rope.rope_dim / 2; i += blockDim.x)
    rope_cos_sin(rope, position, i, cos_shared[i], sin_shared[i]);
}

struct PrepareParams {
  RopeTarget q_pe;                      // [T, heads, vector_stride] rope parts (see MlaPrepareArgs)
  __nv_bfloat16* kv_a;                  // [T, kv_a_stride]: [latent ; k_pe]
  int64_t kv_a_stride;
  const __nv_bfloat16* weight;          // [kv_lora]
  float eps;
  const int32_t* positions;             // [T]
  const int32_t* slots;                 // [T]
  __nv_bfloat16* pool;                  // [num_slots, kv_lora + rope_dim]
  int64_t num_slots;
  int32_t kv_lora;
  RopeParams rope;
  int norm_threads;                     // rms_norm_bf16's block size for dim = kv_lora: multiple of 32, <= blockDim
  int heads_per_block;                  // q heads of one q block
  bool latent_aligned;                  // 16-byte accesses to kv_a's latent and the weight
  bool cache_aligned;                   // 16-byte accesses to cache rows
};

// Block (token, 0): latent norm, k_pe rotation and the cache row. The norm mirrors rms_norm_kernel step for step:
// threads [0, norm_threads) own the 8-column vectors tid + j * norm_threads (j < kNormVectors, zeros past the row),
// sum squares with fmaf in (j, i) order, reduce with the same xor tree per warp and add the warp partials in warp
// order from 0; then y = w * (x * inv_rms). k_pe item k is taken by thread blockDim - 1 - k: counting from the top,
// the k_pe items go to threads without norm work whenever the block has enough of them.
template <RopeAccess kAccess>
__device__ __forceinline__ void prepare_kv_row(const PrepareParams& p, int64_t token, int32_t position,
                                               float* cos_shared, float* sin_shared,
                                               float* warp_partials) {  // [norm_threads / 32]
  const int tid = threadIdx.x;
  const int lora = p.kv_lora, rope_dim = p.rope.rope_dim, half = rope_dim / 2;
  const bool interleaved = p.rope.interleaved;
  const int64_t vectors = (lora + kBf16PerVector - 1) / kBf16PerVector;
  __nv_bfloat16* row = p.kv_a + token * p.kv_a_stride;
  const int32_t slot = p.slots[token];
  __nv_bfloat16* cache_row =
      slot >= 0 && slot < p.num_slots ? p.pool + static_cast<int64_t>(slot) * (lora + rope_dim) : nullptr;

  if constexpr (kAccess == RopeAccess::kPair) fill_cos_sin(p.rope, position, cos_shared, sin_shared);
  const bool norm_thread = tid < p.norm_threads;  // whole warps: norm_threads is a multiple of 32
  uint4 values[kNormVectors], weights[kNormVectors];  // packed bf16, zeros past the row
  if (norm_thread) {
    float sum_squares = 0.0f;
#pragma unroll
    for (int j = 0; j < kNormVectors; ++j) {
      const int64_t v = tid + static_cast<int64_t>(j) * p.norm_threads;
      const int64_t column = v * kBf16PerVector;
      const int count = v < vectors ? static_cast<int>(min(int64_t{kBf16PerVector}, lora - column)) : 0;
      values[j] = load_bf16x8_bits(row + column, count, p.latent_aligned);
      weights[j] = load_bf16x8_bits(p.weight + column, count, p.latent_aligned);
      float x[8];
      unpack_bf16x8(values[j], x);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum_squares = fmaf(x[i], x[i], sum_squares);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, offset);
    if (tid % 32 == 0) warp_partials[tid / 32] = sum_squares;
  }

  using Item = RopeItem<kAccess>;
  const int kpe_item = static_cast<int>(blockDim.x) - 1 - tid;
  const bool kpe_thread = kpe_item < Item::per_vector(rope_dim);
  Item kpe;
  if (kpe_thread) kpe.load(row + lora, kpe_item, half, interleaved);
  if constexpr (kAccess != RopeAccess::kPair) fill_cos_sin(p.rope, position, cos_shared, sin_shared);
  __syncthreads();

  if (norm_thread) {
    float total = 0.0f;
    for (int w = 0; w < p.norm_threads / 32; ++w) total += warp_partials[w];
    const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(lora) + p.eps);
#pragma unroll
    for (int j = 0; j < kNormVectors; ++j) {
      const int64_t v = tid + static_cast<int64_t>(j) * p.norm_threads;
      const int64_t column = v * kBf16PerVector;
      const int count = v < vectors ? static_cast<int>(min(int64_t{kBf16PerVector}, lora - column)) : 0;
      if (count > 0) {
        float x[8], g[8], y[8];
        unpack_bf16x8(values[j], x);
        unpack_bf16x8(weights[j], g);
#pragma unroll
        for (int i = 0; i < 8; ++i) y[i] = g[i] * (x[i] * inv_rms);
        store_bf16x8_partial(row + column, count, p.latent_aligned, y);
        if (cache_row) store_bf16x8_partial(cache_row + column, count, p.cache_aligned, y);
      }
    }
  }
  if (kpe_thread) {
    kpe.rotate(kpe_item, cos_shared, sin_shared);
    kpe.store(row + lora, kpe_item, half, interleaved);
    if (cache_row) kpe.store(cache_row + lora, kpe_item, half, interleaved);
  }
}

// Block (token, 1 + b): q heads [head_begin, head_end). Every item is loaded before the cos/sin barrier.
template <RopeAccess kAccess>
__device__ __forceinline__ void prepare_q_heads(const PrepareParams& p, int64_t token, int32_t position,
                                                int head_begin, int head_end, float* cos_shared, float* sin_shared) {
  using Item = RopeItem<kAccess>;
  const int rope_dim = p.rope.rope_dim, half = rope_dim / 2;
  const bool interleaved = p.rope.interleaved;
  const int per_head = Item::per_vector(rope_dim);
  const int items = (head_end - head_begin) * per_head;  // <= kMaxQItems * blockDim (host)
  const int64_t stride = p.q_pe.vector_stride;
  __nv_bfloat16* first_head = p.q_pe.data + (token * p.q_pe.vectors_per_token + head_begin) * stride;

  if constexpr (kAccess == RopeAccess::kPair) fill_cos_sin(p.rope, position, cos_shared, sin_shared);
  Item item[kMaxQItems];
#pragma unroll
  for (int k = 0; k < kMaxQItems; ++k) {
    const int index = threadIdx.x + k * static_cast<int>(blockDim.x);
    if (index < items) item[k].load(first_head + (index / per_head) * stride, index % per_head, half, interleaved);
  }
  if constexpr (kAccess != RopeAccess::kPair) fill_cos_sin(p.rope, position, cos_shared, sin_shared);
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kMaxQItems; ++k) {
    const int index = threadIdx.x + k * static_cast<int>(blockDim.x);
    if (index < items) {
      item[k].rotate(index % per_head, cos_shared, sin_shared);
      item[k].store(first_head + (index / per_head) * stride, index % per_head, half, interleaved);
    }
  }
}

// grid (T, 1 + q blocks per token); blockIdx.y is uniform in a block, so each branch has its own barrier.
template <RopeAccess kAccess>
__global__ void __launch_bounds__(kMaxThreads) mla_prepare_kernel(PrepareParams p) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ float cos_shared[kMaxRopeDim / 2];
  __shared__ float sin_shared[kMaxRopeDim / 2];
  __shared__ float warp_partials[kMaxThreads / 32];
  const int64_t token = blockIdx.x;
  const int32_t position = p.positions[token];
  if (blockIdx.y == 0) {
    prepare_kv_row<kAccess>(p, token, position, cos_shared, sin_shared, warp_partials);
    return;
  }
  const int head_begin = static_cast<int>(blockIdx.y - 1) * p.heads_per_block;
  const int head_end = static_cast<int>(min(static_cast<int64_t>(head_begin) + p.heads_per_block,
                                            p.q_pe.vectors_per_token));
  prepare_q_heads<kAccess>(p, token, position, head_begin, head_end, cos_shared, sin_shared);
}

// The block size launch_rms_norm picks for dim on its single-pass path: ceil(vectors / kNormVectors) threads,
// rounded up to whole warps.
int rms_norm_block_threads(int64_t dim) {
  const int64_t vectors = (dim + kBf16PerVector - 1) / kBf16PerVector;
  const int64_t threads = (vectors + kNormVectors - 1) / kNormVectors;
  return static_cast<int>((threads + 31) / 32 * 32);
}

template <RopeAccess kAccess>
void launch(const PrepareParams& params, int32_t num_tokens, int threads, cudaStream_t stream) {
  const int per_head = RopeItem<kAccess>::per_vector(params.rope.rope_dim);
  const int heads = static_cast<int>(params.q_pe.vectors_per_token);
  const int max_items = threads * (num_tokens <= kFewTokens ? 1 : kMaxQItems);
  const int max_heads = std::max(1, max_items / per_head);  // per_head <= 128 <= threads: one head always fits
  const int q_blocks = (heads + max_heads - 1) / max_heads;
  FATHOM_CHECK(q_blocks < 65535, "mla_prepare_qkv: " << heads << " q heads need " << q_blocks << " blocks per token");
  PrepareParams p = params;
  p.heads_per_block = (heads + q_blocks - 1) / q_blocks;  // balanced: blocks differ by at most one head
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(1 + q_blocks));
  launch_programmatic(mla_prepare_kernel<kAccess>, grid, dim3(threads), 0, stream, p);
}

}  // namespace

void mla_prepare_qkv(const MlaPrepareArgs& args, const RopeParams& rope, const LatentCacheView& cache,
                     cudaStream_t stream) {
  FATHOM_CHECK(args.num_tokens >= 0, "mla_prepare_qkv: num_tokens " << args.num_tokens);
  if (args.num_tokens == 0) return;
  FATHOM_CHECK(args.q_pe.data && args.kv_a && args.latent_norm_weight && args.positions && args.slots && cache.pool &&
                   rope.inv_freq,
               "mla_prepare_qkv: null pointer (q_pe " << args.q_pe.data << ", kv_a " << args.kv_a << ", weight "
                                                     << args.latent_norm_weight << ", positions " << args.positions
                                                     << ", slots " << args.slots << ", pool " << cache.pool
                                                     << ", inv_freq " << rope.inv_freq << ")");
  const int32_t lora = cache.kv_lora_dim, rope_dim = rope.rope_dim;
  FATHOM_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= kMaxRopeDim && rope_dim == cache.rope_dim,
               "mla_prepare_qkv: rope_dim " << rope_dim << " (cache " << cache.rope_dim << ") must be even, at most "
                                            << kMaxRopeDim << " and match the cache");
  FATHOM_CHECK(lora > 0 && lora <= kMaxKvLora, "mla_prepare_qkv: kv_lora_dim " << lora << " outside [1, " << kMaxKvLora
                                                                                << "]");
  FATHOM_CHECK(args.kv_a_token_stride >= int64_t{lora} + rope_dim,
               "mla_prepare_qkv: kv_a stride " << args.kv_a_token_stride << " below " << lora << " + " << rope_dim);
  FATHOM_CHECK(args.q_pe.vectors_per_token >= 1 && args.q_pe.vector_stride >= rope_dim &&
                   args.q_pe.vectors_per_token * (rope_dim / 2) < (int64_t{1} << 31),
               "mla_prepare_qkv: q_pe has " << args.q_pe.vectors_per_token << " heads at stride "
                                            << args.q_pe.vector_stride << " (rope_dim " << rope_dim << ")");
  FATHOM_CHECK(rope.cos_sin == nullptr || rope.max_positions > 0,
               "mla_prepare_qkv: cos/sin table with max_positions " << rope.max_positions);
  FATHOM_CHECK(cache.num_pages >= 0 && cache.page_size_tokens >= 1,
               "mla_prepare_qkv: cache of " << cache.num_pages << " pages of " << cache.page_size_tokens);

  const int norm_threads = rms_norm_block_threads(lora);
  const int threads = std::max(kMinThreads, norm_threads);
  PrepareParams p{};
  p.q_pe = args.q_pe;
  p.kv_a = args.kv_a;
  p.kv_a_stride = args.kv_a_token_stride;
  p.weight = args.latent_norm_weight;
  p.eps = args.eps;
  p.positions = args.positions;
  p.slots = args.slots;
  p.pool = cache.pool;
  p.num_slots = cache.num_slots();
  p.kv_lora = lora;
  p.rope = rope;
  p.norm_threads = norm_threads;
  const bool kv_a_aligned = args.kv_a_token_stride % 8 == 0 && is_aligned_16(args.kv_a);
  p.latent_aligned = kv_a_aligned && is_aligned_16(args.latent_norm_weight);
  p.cache_aligned = cache.row_elems() % 8 == 0 && is_aligned_16(cache.pool);

  // 16-byte rope items need the rope shape and every rope row aligned: q heads, k_pe in kv_a, k_pe in the cache.
  const int half = rope_dim / 2;
  const bool vector_shape = rope.interleaved ? rope_dim % 8 == 0 : half % 8 == 0;
  const bool q_aligned = args.q_pe.vector_stride % 8 == 0 && is_aligned_16(args.q_pe.data);
  const bool kpe_aligned = lora % 8 == 0 && kv_a_aligned && p.cache_aligned;
  if (!(vector_shape && q_aligned && kpe_aligned)) {
    launch<RopeAccess::kPair>(p, args.num_tokens, threads, stream);
  } else if (rope.interleaved) {
    launch<RopeAccess::kInterleaved8>(p, args.num_tokens, threads, stream);
  } else {
    launch<RopeAccess::kSplit8>(p, args.num_tokens, threads, stream);
  }
}

}  // namespace fathom::kernels::cuda
