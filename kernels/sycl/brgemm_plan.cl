/* One phase of a recorded plan on a SYCL device (OpenCL C, compiled at run
 * time by dpctl). Work-group g runs task (task0 + g) of the phase: its kernel
 * calls in order, each followed by its epilogue ops, exactly the CPU
 * executor's contract (kernels/cpu/plan.c); tasks of one phase write disjoint
 * elements, so work-groups never need to talk to each other.
 *
 * Inside a work-group, sub-groups of SG lanes take TM x SG tiles of the call's
 * C block: lane j owns column j of the tile and keeps TM accumulators; the
 * lanes load SG consecutive k-values of each A row together and share them
 * with sub_group_broadcast, the cooperative pattern Intel GPUs want (on the
 * CPU device a sub-group is one SIMD register). This is the portable path:
 * no DPAS (sub-group matrix) instructions, which no device here has.
 *
 * Tables (all int64 unless said): tensors = USM base address per tensor slot;
 * kdesc = per kernel m, n, k, lda, ldb, ldc, dtype_ab, dtype_c (0 f32, 1 bf16);
 * kscal (float) = per kernel alpha, beta; calls = BRGEMM_CALL_FIELDS per call;
 * a_offs, b_offs = element offsets of the blocks; ops = BRGEMM_OP_FIELDS per op.
 * The op codes and row layouts are not defined here: brgemm/backend/sycl.py
 * prepends them from kernels/cpu/brgemm_cpu.h ("device constants") when it
 * builds the program. */

#define SG 16
#define TM 8

inline float bf16_load(__global const ushort* p, long i) { return as_float(((uint)p[i]) << 16); }

/* round to nearest even, as the CPU side (brgemm_f32_to_bf16); NaN stays NaN */
inline ushort bf16_round(float x) {
  uint u = as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float load_ab(__global const void* base, int bf16, long i) {
  return bf16 ? bf16_load((__global const ushort*)base, i) : ((__global const float*)base)[i];
}

/* acc[r] += sum over the call's blocks of A[i0 + r][:] . B[:][j]; LOAD_A and
 * LOAD_B read element ia of A and ib of B. Lane l first loads A[i0 + r][k0 + l]
 * for all r; the lanes then share those values by broadcast. */
#define BATCH_REDUCE(LOAD_A, LOAD_B)                                                   \
  for (long b = 0; b < count; ++b) {                                                  \
    const long a0 = ao[b], b0 = bo[b];                                                \
    for (long k0 = 0; k0 < k; k0 += SG) {                                             \
      const int kl = (int)min((long)SG, k - k0);                                      \
      float a_lane[TM];                                                               \
      for (int r = 0; r < TM; ++r) {                                                  \
        const long ia = a0 + (i0 + r) * lda + k0 + lane;                              \
        a_lane[r] = (lane < kl && i0 + r < m) ? (LOAD_A) : 0.0f;                      \
      }                                                                               \
      for (int l = 0; l < kl; ++l) {                                                  \
        const long ib = b0 + (k0 + l) * ldb + j;                                      \
        const float bv = jn ? (LOAD_B) : 0.0f;                                        \
        for (int r = 0; r < TM; ++r) acc[r] = fma(sub_group_broadcast(a_lane[r], l), bv, acc[r]); \
      }                                                                               \
    }                                                                                 \
  }

inline float sigm(float x) { return 1.0f / (1.0f + exp(-x)); }

/* op q's operand: tensor slot T(q), element offset O(q) (see BRGEMM_OP_FIELDS) */
#define T(q) op[BRGEMM_OPROW_TENSOR + (q)]
#define O(q) op[BRGEMM_OPROW_OFFSET + (q)]
#define F32(q) ((__global float*)tensors[T(q)] + O(q))
#define BF16(q) ((__global ushort*)tensors[T(q)] + O(q))

/* Epilogue op on element (i, j) of the call's f32 C block c (row stride ldc). */
inline void apply_op(__global const long* op, __global float* c, long i, long j, long ldc,
                     __global const ulong* tensors) {
  const long code = op[BRGEMM_OPROW_CODE], ld = op[BRGEMM_OPROW_LD],
             stride = op[BRGEMM_OPROW_STRIDE];
  const long e = i * ldc + j;
  switch (code) {
    case BRGEMM_OP_BIAS: c[e] += F32(0)[j]; break;
    case BRGEMM_OP_RELU: c[e] = c[e] < 0.0f ? 0.0f : c[e]; break;  /* NaN stays NaN (torch.relu) */
    case BRGEMM_OP_SIGMOID: c[e] = sigm(c[e]); break;
    case BRGEMM_OP_TANH: c[e] = tanh(c[e]); break;
    case BRGEMM_OP_STORE_BF16: BF16(0)[i * ld + j] = bf16_round(c[e]); break;
    case BRGEMM_OP_LSTM_CELL: {
      __global float* g = F32(0);  /* gate blocks have the call's row stride */
      const long s = i * ld + j;
      const float ig = sigm(g[e]), fg = sigm(g[e + stride]);
      const float gg = tanh(g[e + 2 * stride]), og = sigm(g[e + 3 * stride]);
      const float cc = fg * F32(1)[s] + ig * gg;
      g[e] = ig; g[e + stride] = fg; g[e + 2 * stride] = gg; g[e + 3 * stride] = og;
      F32(2)[s] = cc;
      const float h = og * tanh(cc);
      F32(3)[s] = h;
      if (T(4) >= 0) BF16(4)[s] = bf16_round(h);
      break;
    }
    case BRGEMM_OP_LSTM_CELL_BWD: {
      const long s = i * ld + j;
      __global const float* gt = F32(1);
      __global float* dcp = F32(4);
      __global float* dg = F32(5);
      const float dh = c[e] + F32(0)[s];
      const float tc = tanh(F32(2)[s]);
      const float ig = gt[s], fg = gt[s + stride], gg = gt[s + 2 * stride], og = gt[s + 3 * stride];
      const float dcc = dcp[s] + dh * og * (1.0f - tc * tc);
      const float d[4] = {dcc * gg * ig * (1.0f - ig), dcc * F32(3)[s] * fg * (1.0f - fg),
                          dcc * ig * (1.0f - gg * gg), dh * tc * og * (1.0f - og)};
      for (int q = 0; q < 4; ++q) dg[s + q * stride] = d[q];
      if (T(6) >= 0)  /* bf16 copies, the operands of the GEMMs that read them */
        for (int q = 0; q < 4; ++q) BF16(6)[s + q * stride] = bf16_round(d[q]);
      dcp[s] = dcc * fg;
      break;
    }
  }
}

__attribute__((intel_reqd_sub_group_size(SG)))
__kernel void brgemm_plan_phase(__global const ulong* tensors, __global const long* kdesc,
                                __global const float* kscal, __global const long* calls,
                                __global const long* a_offs, __global const long* b_offs,
                                __global const long* ops, __global const long* task_begin,
                                long task0) {
  const long task = task0 + get_group_id(0);
  const int lane = get_sub_group_local_id();
  const int sg = get_sub_group_id(), n_sg = get_num_sub_groups();
  const int lid = get_local_id(0), wg = get_local_size(0);

  for (long ci = task_begin[task]; ci < task_begin[task + 1]; ++ci) {
    __global const long* call = calls + ci * BRGEMM_CALL_FIELDS;
    __global const long* kd = kdesc + call[BRGEMM_CALL_KERNEL] * BRGEMM_KDESC_FIELDS;
    const long m = kd[0], n = kd[1], k = kd[2], lda = kd[3], ldb = kd[4], ldc = kd[5];
    const int ab16 = kd[6] == BRGEMM_BF16, c16 = kd[7] == BRGEMM_BF16;
    const long kid = call[BRGEMM_CALL_KERNEL];
    const float alpha = kscal[2 * kid], beta = kscal[2 * kid + 1];
    __global const void* A = (__global const void*)tensors[call[BRGEMM_CALL_A]];
    __global const void* B = (__global const void*)tensors[call[BRGEMM_CALL_B]];
    __global float* C32 = (__global float*)tensors[call[BRGEMM_CALL_C]] + call[BRGEMM_CALL_COFF];
    __global ushort* C16 = (__global ushort*)tensors[call[BRGEMM_CALL_C]] + call[BRGEMM_CALL_COFF];
    const long count = call[BRGEMM_CALL_COUNT];
    __global const long* ao = a_offs + call[BRGEMM_CALL_OFFS];
    __global const long* bo = b_offs + call[BRGEMM_CALL_OFFS];

    const long tiles_m = (m + TM - 1) / TM, tiles_n = (n + SG - 1) / SG;
    for (long t = sg; t < tiles_m * tiles_n; t += n_sg) {
      const long i0 = (t / tiles_n) * TM, j = (t % tiles_n) * SG + lane;
      const int jn = j < n;
      float acc[TM];
      for (int r = 0; r < TM; ++r) acc[r] = 0.0f;
      /* the dtype is uniform per call: one loop per dtype keeps the branch out
       * of the inner loop (the CPU device's compiler does not unswitch it) */
      if (ab16) BATCH_REDUCE(bf16_load((__global const ushort*)A, ia), bf16_load((__global const ushort*)B, ib))
      else BATCH_REDUCE(((__global const float*)A)[ia], ((__global const float*)B)[ib])
      if (jn)
        for (int r = 0; r < TM && i0 + r < m; ++r) {
          const long e = (i0 + r) * ldc + j;
          float v = alpha * acc[r];
          if (beta != 0.0f) v += beta * (c16 ? bf16_load(C16, e) : C32[e]);
          if (c16) C16[e] = bf16_round(v); else C32[e] = v;
        }
    }
    barrier(CLK_GLOBAL_MEM_FENCE);  /* the whole block is written before its ops read it */
    const long n_ops = call[BRGEMM_CALL_OPCOUNT];
    for (long o = 0; o < n_ops; ++o) {
      __global const long* op = ops + (call[BRGEMM_CALL_OPBEGIN] + o) * BRGEMM_OP_FIELDS;
      for (long e = lid; e < m * n; e += wg) apply_op(op, C32, e / n, e % n, ldc, tensors);
      barrier(CLK_GLOBAL_MEM_FENCE);  /* ops run in order; the next call may read this one */
    }
  }
}
