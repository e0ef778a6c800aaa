/* See onednn_job.h. Written against oneDNN 3.x's C API. */
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>

#include "onednn_job.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXARGS 32

struct onednn_job {
  dnnl_engine_t eng;
  dnnl_stream_t st;
  dnnl_primitive_t prim;
  dnnl_primitive_desc_t pd;
  dnnl_exec_arg_t args[MAXARGS];
  int nargs;
  dnnl_memory_t out_mem;        /* the output, in the primitive's format */
  dnnl_memory_desc_t out_user;  /* the output's plain f32 layout */
  char impl[128];
};

static char err[512];
const char* onednn_error(void) { return err; }

#define CHECK(call)                                                                  \
  do {                                                                               \
    dnnl_status_t s_ = (call);                                                       \
    if (s_ != dnnl_success) {                                                        \
      snprintf(err, sizeof err, "%s failed with status %d (line %d)", #call, (int)s_, __LINE__); \
      return -1;                                                                     \
    }                                                                                \
  } while (0)

/* copy between two memories with a reorder primitive */
static int reorder(onednn_job* j, dnnl_memory_t from, dnnl_memory_t to) {
  const_dnnl_memory_desc_t fmd, tmd;
  CHECK(dnnl_memory_get_memory_desc(from, &fmd));
  CHECK(dnnl_memory_get_memory_desc(to, &tmd));
  dnnl_primitive_desc_t rpd;
  dnnl_primitive_t r;
  CHECK(dnnl_reorder_primitive_desc_create(&rpd, fmd, j->eng, tmd, j->eng, NULL));
  CHECK(dnnl_primitive_create(&r, rpd));
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  CHECK(dnnl_primitive_execute(r, j->st, 2, a));
  CHECK(dnnl_stream_wait(j->st));
  dnnl_primitive_destroy(r);
  dnnl_primitive_desc_destroy(rpd);
  return 0;
}

/* one argument: memory in the primitive's format, filled from plain f32 `data`
 * (inputs) or remembered as the output */
static int add_arg(onednn_job* j, int arg, dnnl_query_t q, int ndims, const dnnl_dims_t dims,
                   dnnl_format_tag_t plain, const float* data, int is_output) {
  const_dnnl_memory_desc_t md = dnnl_primitive_desc_query_md(j->pd, q, 0);
  dnnl_memory_t mem, user;
  dnnl_memory_desc_t umd;
  CHECK(dnnl_memory_create(&mem, md, j->eng, DNNL_MEMORY_ALLOCATE));
  CHECK(dnnl_memory_desc_create_with_tag(&umd, ndims, dims, dnnl_f32, plain));
  if (is_output) {
    j->out_mem = mem;
    j->out_user = umd;
  } else {
    CHECK(dnnl_memory_create(&user, umd, j->eng, (void*)data));
    if (reorder(j, user, mem)) return -1;
    dnnl_memory_destroy(user);
    dnnl_memory_desc_destroy(umd);
  }
  j->args[j->nargs].arg = arg;
  j->args[j->nargs].memory = mem;
  j->nargs++;
  return 0;
}

static int finish(onednn_job* j) {
  const_dnnl_memory_desc_t smd = dnnl_primitive_desc_query_md(j->pd, dnnl_query_scratchpad_md, 0);
  if (smd) {
    dnnl_memory_t s;
    CHECK(dnnl_memory_create(&s, smd, j->eng, DNNL_MEMORY_ALLOCATE));
    j->args[j->nargs].arg = DNNL_ARG_SCRATCHPAD;
    j->args[j->nargs].memory = s;
    j->nargs++;
  }
  const char* name = NULL;
  CHECK(dnnl_primitive_desc_query(j->pd, dnnl_query_impl_info_str, 0, &name));
  snprintf(j->impl, sizeof j->impl, "%s", name ? name : "?");
  CHECK(dnnl_primitive_create(&j->prim, j->pd));
  return 0;
}

static onednn_job* job_new(void) {
  onednn_job* j = (onednn_job*)calloc(1, sizeof *j);
  if (!j) return NULL;
  if (dnnl_engine_create(&j->eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&j->st, j->eng, dnnl_stream_default_flags) != dnnl_success) {
    snprintf(err, sizeof err, "cannot create a oneDNN CPU engine and stream");
    free(j);
    return NULL;
  }
  return j;
}

static int md(dnnl_memory_desc_t* out, int ndims, const dnnl_dims_t dims, int bf16, int is_output) {
  CHECK(dnnl_memory_desc_create_with_tag(out, ndims, dims,
                                         bf16 && !is_output ? dnnl_bf16 : dnnl_f32,
                                         dnnl_format_tag_any));
  return 0;
}

/* The pass's primitive (fwd given) and its three arguments: plain layouts
 * xt/wt/yt for x, w, y, user data x, w, dy. */
static int make_pass(onednn_job* j, int pass, dnnl_primitive_desc_t fwd, dnnl_primitive_desc_t pd,
                     int nd, const dnnl_dims_t xd, const dnnl_dims_t wd, const dnnl_dims_t yd,
                     dnnl_format_tag_t xt, dnnl_format_tag_t wt, dnnl_format_tag_t yt,
                     const float* x, const float* w, const float* dy) {
  j->pd = pass == ONEDNN_FWD ? fwd : pd;
  if (pass == ONEDNN_FWD)
    return add_arg(j, DNNL_ARG_SRC, dnnl_query_src_md, nd, xd, xt, x, 0) ||
           add_arg(j, DNNL_ARG_WEIGHTS, dnnl_query_weights_md, nd, wd, wt, w, 0) ||
           add_arg(j, DNNL_ARG_DST, dnnl_query_dst_md, nd, yd, yt, NULL, 1);
  dnnl_primitive_desc_destroy(fwd);  /* only a hint for the backward passes */
  if (pass == ONEDNN_BWD_DATA)
    return add_arg(j, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, nd, yd, yt, dy, 0) ||
           add_arg(j, DNNL_ARG_WEIGHTS, dnnl_query_weights_md, nd, wd, wt, w, 0) ||
           add_arg(j, DNNL_ARG_DIFF_SRC, dnnl_query_diff_src_md, nd, xd, xt, NULL, 1);
  return add_arg(j, DNNL_ARG_SRC, dnnl_query_src_md, nd, xd, xt, x, 0) ||
         add_arg(j, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, nd, yd, yt, dy, 0) ||
         add_arg(j, DNNL_ARG_DIFF_WEIGHTS, dnnl_query_diff_weights_md, nd, wd, wt, NULL, 1);
}

int onednn_ip(onednn_job** out, int pass, int64_t N, int64_t C, int64_t K, int bf16,
              const float* x, const float* w, const float* dy) {
  onednn_job* j = job_new();
  if (!j) return -1;
  *out = j;
  dnnl_dims_t xd = {N, C}, wd = {K, C}, yd = {N, K};
  /* the forward (also the backward passes' hint) reads bf16 x, w and writes f32 y;
   * the backward passes read bf16 dy and write f32 dx or dw */
  dnnl_memory_desc_t xm, wm, ym, dxm, dwm, dym;
  if (md(&xm, 2, xd, bf16, 0) || md(&wm, 2, wd, bf16, 0) || md(&ym, 2, yd, bf16, 1) ||
      md(&dxm, 2, xd, bf16, 1) || md(&dwm, 2, wd, bf16, 1) || md(&dym, 2, yd, bf16, 0))
    return -1;
  dnnl_primitive_desc_t fwd, pd = NULL;
  CHECK(dnnl_inner_product_forward_primitive_desc_create(&fwd, j->eng, dnnl_forward_training, xm,
                                                         wm, NULL, ym, NULL));
  if (pass == ONEDNN_BWD_DATA)
    CHECK(dnnl_inner_product_backward_data_primitive_desc_create(&pd, j->eng, dxm, wm, dym, fwd,
                                                                 NULL));
  else if (pass == ONEDNN_BWD_WEIGHTS)
    CHECK(dnnl_inner_product_backward_weights_primitive_desc_create(&pd, j->eng, xm, dwm, NULL,
                                                                    dym, fwd, NULL));
  dnnl_memory_desc_t all[6] = {xm, wm, ym, dxm, dwm, dym};
  for (int i = 0; i < 6; ++i) dnnl_memory_desc_destroy(all[i]);
  if (make_pass(j, pass, fwd, pd, 2, xd, wd, yd, dnnl_nc, dnnl_oi, dnnl_nc, x, w, dy)) return -1;
  return finish(j);
}

int onednn_conv(onednn_job** out, int pass, int64_t N, int64_t C, int64_t K, int64_t H,
                int64_t W, int64_t R, int64_t S, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                int bf16, const float* x, const float* w, const float* dy) {
  onednn_job* j = job_new();
  if (!j) return -1;
  *out = j;
  const int64_t P = (H + 2 * ph - R) / sh + 1, Q = (W + 2 * pw - S) / sw + 1;
  dnnl_dims_t xd = {N, C, H, W}, wd = {K, C, R, S}, yd = {N, K, P, Q};
  dnnl_dims_t strides = {sh, sw}, dil = {0, 0}, pad = {ph, pw};
  dnnl_memory_desc_t xm, wm, ym, dxm, dwm, dym;  /* as in onednn_ip */
  if (md(&xm, 4, xd, bf16, 0) || md(&wm, 4, wd, bf16, 0) || md(&ym, 4, yd, bf16, 1) ||
      md(&dxm, 4, xd, bf16, 1) || md(&dwm, 4, wd, bf16, 1) || md(&dym, 4, yd, bf16, 0))
    return -1;
  dnnl_primitive_desc_t fwd, pd = NULL;
  CHECK(dnnl_convolution_forward_primitive_desc_create(&fwd, j->eng, dnnl_forward_training,
                                                       dnnl_convolution_direct, xm, wm, NULL, ym,
                                                       strides, dil, pad, pad, NULL));
  if (pass == ONEDNN_BWD_DATA)
    CHECK(dnnl_convolution_backward_data_primitive_desc_create(
        &pd, j->eng, dnnl_convolution_direct, dxm, wm, dym, strides, dil, pad, pad, fwd, NULL));
  else if (pass == ONEDNN_BWD_WEIGHTS)
    CHECK(dnnl_convolution_backward_weights_primitive_desc_create(
        &pd, j->eng, dnnl_convolution_direct, xm, dwm, NULL, dym, strides, dil, pad, pad, fwd,
        NULL));
  dnnl_memory_desc_t all[6] = {xm, wm, ym, dxm, dwm, dym};
  for (int i = 0; i < 6; ++i) dnnl_memory_desc_destroy(all[i]);
  if (make_pass(j, pass, fwd, pd, 4, xd, wd, yd, dnnl_nchw, dnnl_oihw, dnnl_nchw, x, w, dy))
    return -1;
  return finish(j);
}

/* RNN arguments: memory in the primitive's format for `arg`, filled from user
 * data (plain layout `tag`) or from another memory, appended to `list` */
static int rnn_arg(onednn_job* j, dnnl_primitive_desc_t pd, int arg, int nd, const dnnl_dims_t dims,
                   dnnl_format_tag_t tag, const float* data, dnnl_memory_t from,
                   dnnl_exec_arg_t* list, int* n, dnnl_memory_t* made) {
  const_dnnl_memory_desc_t md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
  dnnl_memory_t mem;
  CHECK(dnnl_memory_create(&mem, md, j->eng, DNNL_MEMORY_ALLOCATE));
  if (data) {
    dnnl_memory_desc_t umd;
    dnnl_memory_t user;
    CHECK(dnnl_memory_desc_create_with_tag(&umd, nd, dims, dnnl_f32, tag));
    CHECK(dnnl_memory_create(&user, umd, j->eng, (void*)data));
    if (reorder(j, user, mem)) return -1;
    dnnl_memory_destroy(user);
    dnnl_memory_desc_destroy(umd);
  } else if (from && reorder(j, from, mem)) {
    return -1;
  }
  list[*n].arg = arg;
  list[*n].memory = mem;
  ++*n;
  if (made) *made = mem;
  return 0;
}

int onednn_lstm(onednn_job** out, int pass, int64_t T, int64_t N, int64_t C, int64_t K, int bf16,
                const float* x, const float* h0, const float* c0, const float* w_ih,
                const float* w_hh, const float* b, const float* dy, const float* dhT,
                const float* dcT) {
  onednn_job* j = job_new();
  if (!j) return -1;
  *out = j;
  dnnl_dims_t xd = {T, N, C}, sd = {1, 1, N, K}, wxd = {1, 1, C, 4, K}, whd = {1, 1, K, 4, K},
              bd = {1, 1, 4, K}, yd = {T, N, K};
  /* m: x, h state, weights, bias, y, c state. bf16 (oneDNN's RNN data types):
   * x, h, weights and y bf16; the c state and the bias f32; every diff_* f32 */
  dnnl_memory_desc_t m[6], d[6];
  const int64_t* dims[6] = {xd, sd, wxd, whd, bd, yd};
  const int nds[6] = {3, 4, 5, 5, 4, 3};
  for (int i = 0; i < 6; ++i) {
    const dnnl_data_type_t dt = bf16 && i != 4 ? dnnl_bf16 : dnnl_f32;
    CHECK(dnnl_memory_desc_create_with_tag(&m[i], nds[i], dims[i], dt, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_create_with_tag(&d[i], nds[i], dims[i], dnnl_f32, dnnl_format_tag_any));
  }
  dnnl_memory_desc_t mc = d[1];  /* the c state: f32 either way */
  dnnl_primitive_desc_t fpd;
  CHECK(dnnl_lstm_forward_primitive_desc_create(&fpd, j->eng, dnnl_forward_training,
                                                dnnl_unidirectional_left2right, m[0], m[1], mc,
                                                m[2], m[3], NULL, NULL, m[4], m[5], m[1], mc,
                                                dnnl_rnn_flags_undef, NULL));
  /* forward arguments (the output of a fwd job, the saved state of a bwd job) */
  dnnl_exec_arg_t fa[MAXARGS];
  int nf = 0;
  dnnl_memory_t y, hT, cT, ws;
  if (rnn_arg(j, fpd, DNNL_ARG_SRC_LAYER, 3, xd, dnnl_tnc, x, NULL, fa, &nf, NULL) ||
      rnn_arg(j, fpd, DNNL_ARG_SRC_ITER, 4, sd, dnnl_ldnc, h0, NULL, fa, &nf, NULL) ||
      rnn_arg(j, fpd, DNNL_ARG_SRC_ITER_C, 4, sd, dnnl_ldnc, c0, NULL, fa, &nf, NULL) ||
      rnn_arg(j, fpd, DNNL_ARG_WEIGHTS_LAYER, 5, wxd, dnnl_ldgoi, w_ih, NULL, fa, &nf, NULL) ||
      rnn_arg(j, fpd, DNNL_ARG_WEIGHTS_ITER, 5, whd, dnnl_ldgoi, w_hh, NULL, fa, &nf, NULL) ||
      rnn_arg(j, fpd, DNNL_ARG_BIAS, 4, bd, dnnl_ldgo, b, NULL, fa, &nf, NULL) ||
      rnn_arg(j, fpd, DNNL_ARG_DST_LAYER, 3, yd, dnnl_tnc, NULL, NULL, fa, &nf, &y) ||
      rnn_arg(j, fpd, DNNL_ARG_DST_ITER, 4, sd, dnnl_ldnc, NULL, NULL, fa, &nf, &hT) ||
      rnn_arg(j, fpd, DNNL_ARG_DST_ITER_C, 4, sd, dnnl_ldnc, NULL, NULL, fa, &nf, &cT) ||
      rnn_arg(j, fpd, DNNL_ARG_WORKSPACE, 0, NULL, 0, NULL, NULL, fa, &nf, &ws))
    return -1;
  if (pass == ONEDNN_FWD) {
    j->pd = fpd;
    memcpy(j->args, fa, sizeof fa);
    j->nargs = nf;
    j->out_mem = y;
    CHECK(dnnl_memory_desc_create_with_tag(&j->out_user, 3, yd, dnnl_f32, dnnl_tnc));
  } else {
    dnnl_primitive_t fp;
    CHECK(dnnl_primitive_create(&fp, fpd));
    CHECK(dnnl_primitive_execute(fp, j->st, nf, fa));
    CHECK(dnnl_stream_wait(j->st));
    dnnl_primitive_destroy(fp);
    CHECK(dnnl_lstm_backward_primitive_desc_create(
        &j->pd, j->eng, dnnl_backward, dnnl_unidirectional_left2right, m[0], m[1], mc, m[2],
        m[3], NULL, NULL, m[4], m[5], m[1], mc, d[0], d[1], d[1], d[2], d[3], NULL, NULL, d[4],
        d[5], d[1], d[1], dnnl_rnn_flags_undef, fpd, NULL));
    int n = 0;
    dnnl_memory_t dx;
    if (rnn_arg(j, j->pd, DNNL_ARG_SRC_LAYER, 3, xd, dnnl_tnc, x, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_SRC_ITER, 4, sd, dnnl_ldnc, h0, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_SRC_ITER_C, 4, sd, dnnl_ldnc, c0, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_WEIGHTS_LAYER, 5, wxd, dnnl_ldgoi, w_ih, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_WEIGHTS_ITER, 5, whd, dnnl_ldgoi, w_hh, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_BIAS, 4, bd, dnnl_ldgo, b, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DST_LAYER, 0, NULL, 0, NULL, y, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DST_ITER, 0, NULL, 0, NULL, hT, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DST_ITER_C, 0, NULL, 0, NULL, cT, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DIFF_DST_LAYER, 3, yd, dnnl_tnc, dy, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DIFF_DST_ITER, 4, sd, dnnl_ldnc, dhT, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DIFF_DST_ITER_C, 4, sd, dnnl_ldnc, dcT, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DIFF_SRC_LAYER, 0, NULL, 0, NULL, NULL, j->args, &n, &dx) ||
        rnn_arg(j, j->pd, DNNL_ARG_DIFF_SRC_ITER, 0, NULL, 0, NULL, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DIFF_SRC_ITER_C, 0, NULL, 0, NULL, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DIFF_WEIGHTS_LAYER, 0, NULL, 0, NULL, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DIFF_WEIGHTS_ITER, 0, NULL, 0, NULL, NULL, j->args, &n, NULL) ||
        rnn_arg(j, j->pd, DNNL_ARG_DIFF_BIAS, 0, NULL, 0, NULL, NULL, j->args, &n, NULL))
      return -1;
    j->args[n].arg = DNNL_ARG_WORKSPACE;  /* the forward's, as it left it */
    j->args[n++].memory = ws;
    j->nargs = n;
    j->out_mem = dx;
    CHECK(dnnl_memory_desc_create_with_tag(&j->out_user, 3, xd, dnnl_f32, dnnl_tnc));
    /* the forward's memories served as sources above; the bwd job owns copies */
    for (int i = 0; i < nf; ++i)
      if (fa[i].memory != ws) dnnl_memory_destroy(fa[i].memory);
    dnnl_primitive_desc_destroy(fpd);
  }
  for (int i = 0; i < 6; ++i) {
    dnnl_memory_desc_destroy(m[i]);
    dnnl_memory_desc_destroy(d[i]);
  }
  return finish(j);
}

int onednn_run(onednn_job* j, int times) {
  for (int i = 0; i < times; ++i) CHECK(dnnl_primitive_execute(j->prim, j->st, j->nargs, j->args));
  CHECK(dnnl_stream_wait(j->st));
  return 0;
}

int onednn_result(onednn_job* j, float* out) {
  dnnl_memory_t user;
  CHECK(dnnl_memory_create(&user, j->out_user, j->eng, out));
  int rc = reorder(j, j->out_mem, user);
  dnnl_memory_destroy(user);
  return rc;
}

const char* onednn_impl(onednn_job* j) { return j->impl; }

void onednn_destroy(onednn_job* j) {
  if (!j) return;
  for (int i = 0; i < j->nargs; ++i) dnnl_memory_destroy(j->args[i].memory);
  if (j->out_user) dnnl_memory_desc_destroy(j->out_user);
  if (j->prim) dnnl_primitive_destroy(j->prim);
  if (j->pd) dnnl_primitive_desc_destroy(j->pd);
  if (j->st) dnnl_stream_destroy(j->st);
  if (j->eng) dnnl_engine_destroy(j->eng);
  free(j);
}
