// A PTX module for the driver-API corpus programs: `axpb(p, n, stride, a, b)` sets
// p[i*stride] = p[i*stride]*a + b + i for i < n (one thread per i).
#pragma once
static const char *AXPB_PTX =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry axpb(.param .u64 p, .param .u32 n, .param .u32 stride, .param .u32 a, .param .u32 b) {\n"
    "  .reg .b32 %r<10>; .reg .b64 %rd<5>; .reg .pred %p1;\n"
    "  ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n]; ld.param.u32 %r6, [stride];\n"
    "  ld.param.u32 %r7, [a]; ld.param.u32 %r8, [b];\n"
    "  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r2, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p1, %r2, %r1; @%p1 bra DONE;\n"
    "  mul.lo.u32 %r5, %r2, %r6;\n"
    "  cvta.to.global.u64 %rd1, %rd1; mul.wide.u32 %rd2, %r5, 4; add.s64 %rd3, %rd1, %rd2;\n"
    "  ld.global.u32 %r3, [%rd3];\n"
    "  mad.lo.s32 %r3, %r3, %r7, %r8;\n"
    "  add.s32 %r3, %r3, %r2;\n"
    "  st.global.u32 [%rd3], %r3;\n"
    "DONE:\n  ret;\n}\n";
