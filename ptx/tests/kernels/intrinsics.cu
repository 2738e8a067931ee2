// Math functions and integer intrinsics as nvcc expands them (inline sequences and .func
// helpers), for comparison with the CPU.

extern "C" __global__ void double_math(const double* x, double* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = x[i];
    double* o = out + 12 * i;
    o[0] = log(v);
    o[1] = atan2(v, 1.5);
    o[2] = cbrt(v);
    o[3] = fmod(v * 7.0, 3.0);
    o[4] = tanh(v / 4.0);
    o[5] = erf(v / 32.0);
    o[6] = cos(v);
    o[7] = sqrt(v);
    o[8] = floor(v * 3.3);
    o[9] = v / (v + 3.0);
    o[10] = log1p(v);
    o[11] = exp2(v / 2.0);
}

extern "C" __global__ void float_math(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    float* o = out + 8 * i;
    o[0] = logf(v);
    o[1] = expf(v / 4.0f);
    o[2] = tanf(v / 8.0f);
    o[3] = __fdividef(v, 3.0f);
    o[4] = rsqrtf(v);
    o[5] = __expf(v / 4.0f);
    o[6] = fminf(v, 3.0f) + fmaxf(v, 1.0f);
    unsigned short h;
    float back;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v * 0.5f));
    asm("cvt.f32.f16 %0, %1;" : "=f"(back) : "h"(h));
    o[7] = back;
}

extern "C" __global__ void int_intrinsics(const unsigned* x, unsigned* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned v = x[i];
    unsigned* o = out + 10 * i;
    o[0] = __popc(v);
    o[1] = __clz(v);
    o[2] = __brev(v);
    o[3] = __ffs(v);
    o[4] = __byte_perm(v, 0x01234567u, 0x5140);
    o[5] = __funnelshift_l(v, 0xdeadbeefu, i % 40);
    o[6] = __mul24(v & 0xffffff, 77u);
    o[7] = __umulhi(v, 0x9e3779b9u);
    o[8] = (unsigned)((long long)(int)v / (i - 7 == 0 ? 3 : i - 7));
    o[9] = __usad(v & 0xff, 100u, 5u);
}
