// Control flow and calling conventions: local arrays with dynamic indexing, switch,
// non-inlined and recursive device functions, 64-bit division, narrow types.
struct Pair { long long a; int b; };

__device__ __noinline__ Pair combine(Pair x, int k) {
    Pair r;
    r.a = x.a * k + 3;
    r.b = x.b ^ k;
    return r;
}

__device__ __noinline__ unsigned long long fact(int n) {
    return n <= 1 ? 1ull : n * fact(n - 1);
}

__device__ __noinline__ int rsum(int n, int seed) {
    int buf[8];
    for (int k = 0; k < 8; ++k) buf[k] = seed * k + n;
    int idx = (seed + n) & 7;
    if (n == 0) return buf[idx];
    return buf[idx] + rsum(n - 1, seed + 1);
}

extern "C" __global__ void recursive_locals(const int* in, int* out) {
    int t = threadIdx.x;
    out[t] = rsum(in[t] & 15, in[t]);
}

extern "C" __global__ void control(const int* in, long long* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int v = in[i];
    int arr[16];
    for (int k = 0; k < 16; ++k) arr[k] = v * k - (k >> 1);
    long long s = arr[(v & 15)] + arr[(v >> 4) & 15];
    switch (v % 5) {
        case 0: s += 100; break;
        case 1: s *= 3; break;
        case 2: s -= 7; break;
        case 3: s = -s; break;
        default: s ^= 0x55; break;
    }
    Pair p = combine(Pair{(long long)v << 20, v}, i + 1);
    long long q = (long long)v * 1000003LL / (long long)(i + 1) % 97;
    unsigned char c = (unsigned char)(v * 13);
    short h = (short)(v * -7);
    out[5 * i + 0] = s;
    out[5 * i + 1] = p.a + p.b;
    out[5 * i + 2] = q;
    out[5 * i + 3] = c + h;
    out[5 * i + 4] = (long long)fact(i % 15);
}
