/* A oneDNN primitive set up for timing: its own best ('any') memory formats,
 * inputs reordered in from plain f32 arrays outside the timed region, the
 * output reordered back to plain f32 on request. Also the cffi cdef, hence
 * no preprocessor lines: include <stdint.h> before it. */

typedef struct onednn_job onednn_job;

enum { ONEDNN_FWD = 0, ONEDNN_BWD_DATA = 1, ONEDNN_BWD_WEIGHTS = 2 };

/* Inner product y[N,K] = x[N,C] w[K,C]^T. Inputs by pass: fwd x, w;
 * bwd_data dy, w; bwd_weights x, dy. Plain row-major f32; bf16 != 0 runs
 * with bf16 inputs (f32 outputs). Output: y [N,K], dx [N,C] or dw [K,C]. */
int onednn_ip(onednn_job** out, int pass, int64_t N, int64_t C, int64_t K, int bf16,
              const float* x, const float* w, const float* dy);

/* Convolution (no bias, dilation 1, groups 1): x [N,C,H,W], w [K,C,R,S],
 * y [N,K,P,Q] (NCHW), stride (sh, sw), padding (ph, pw) on both sides. */
int onednn_conv(onednn_job** out, int pass, int64_t N, int64_t C, int64_t K, int64_t H,
                int64_t W, int64_t R, int64_t S, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                int bf16, const float* x, const float* w, const float* dy);

/* LSTM, one layer, left to right, torch.nn.LSTM layouts: x [T,N,C], h0 c0 [N,K],
 * w_ih [4K,C], w_hh [4K,K], b [4K] (gates i, f, g, o), dy [T,N,K], dhT dcT [N,K].
 * fwd (training, workspace kept) outputs y; bwd_data runs the forward once
 * when made, then each run is the backward pass (data and weights), output dx. f32. */
int onednn_lstm(onednn_job** out, int pass, int64_t T, int64_t N, int64_t C, int64_t K, int bf16,
                const float* x, const float* h0, const float* c0, const float* w_ih,
                const float* w_hh, const float* b, const float* dy, const float* dhT,
                const float* dcT);

int onednn_run(onednn_job* job, int times);           /* execute `times` times, then wait */
int onednn_result(onednn_job* job, float* out);      /* the output, plain f32 */
const char* onednn_impl(onednn_job* job);            /* implementation name, e.g. brgemm:avx2 */
const char* onednn_error(void);                      /* what the last failure was */
void onednn_destroy(onednn_job* job);
