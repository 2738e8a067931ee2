// Mipmapped arrays: a 2-D float array of four levels and a 1-D one of three, each level
// filled (cudaMemcpy2DToArray on the level's array) with values that name the level and the
// texel, read back from one level; textures over them sampled with tex2DLod / tex1DLod at
// every level and between levels (linear mipmap filtering), with point mipmap filtering, a
// level bias, clamps, and tex2DGrad. Every sample is checked against a CPU model of the
// sampler. The arrays and textures made before the gates are sampled again after them (and
// so after a restart).
#include "common.h"
#include <cmath>
#include <vector>

static const int W = 64, H = 32, LEVELS = 4, W1 = 16, LEVELS1 = 3;
static const int NU = 8, NV = 4;
static const float LODS[] = {0.0f, 1.0f, 2.0f, 3.0f, 0.5f, 1.25f, 2.75f, 5.0f, -1.0f, 1.4f, 1.6f};
static const int NL = sizeof(LODS) / sizeof(LODS[0]);

static float texel(int l, int x, int y) { return l * 1000.0f + y * 64 + x; }
static float texel1(int l, int x) { return l * 100.0f + x * 2; }

__global__ void sample2d(cudaTextureObject_t t, float *out, const float *lods, int nl) {
    int u = threadIdx.x, v = threadIdx.y, l = blockIdx.x;
    float fu = (u + 0.3f) / NU, fv = (v + 0.6f) / NV;
    out[(l * NV + v) * NU + u] = tex2DLod<float>(t, fu, fv, lods[l]);
}
__global__ void sample1d(cudaTextureObject_t t, float *out, const float *lods) {
    int u = threadIdx.x, l = blockIdx.x;
    out[l * NU + u] = tex1DLod<float>(t, (u + 0.3f) / NU, lods[l]);
}
// Gradients of 4 level-0 texels along x: level 2.
__global__ void sample_grad(cudaTextureObject_t t, float *out) {
    int u = threadIdx.x, v = threadIdx.y;
    float fu = (u + 0.3f) / NU, fv = (v + 0.6f) / NV;
    out[v * NU + u] = tex2DGrad<float>(t, fu, fv, make_float2(4.0f / W, 0), make_float2(0, 1.0f / H));
}

// The CPU model: point sampling within a level (normalized, clamped), levels chosen from the
// clamped level of detail, linear between levels with an 8-bit fraction.
static float point2d(int l, float fu, float fv) {
    int w = W >> l, h = H >> l;
    int x = (int)floorf(fu * w), y = (int)floorf(fv * h);
    x = x < 0 ? 0 : x >= w ? w - 1 : x;
    y = y < 0 ? 0 : y >= h ? h - 1 : y;
    return texel(l, x, y);
}
static float point1d(int l, float fu) {
    int w = W1 >> l;
    int x = (int)floorf(fu * w);
    x = x < 0 ? 0 : x >= w ? w - 1 : x;
    return texel1(l, x);
}
template <class F>
static float model(float lod, float bias, float lo, float hi, int levels, bool linear, F level) {
    lod += bias;
    lod = fmaxf(lod, lo);
    lod = fminf(lod, hi);
    lod = fminf(fmaxf(lod, 0.0f), levels - 1.0f);
    if (!linear) return level((int)(ceilf(lod + 0.5f) - 1.0f) < 0 ? 0 : (int)(ceilf(lod + 0.5f) - 1.0f));
    int l0 = (int)floorf(lod);
    float f = roundf((lod - l0) * 256.0f) / 256.0f;
    float a = level(l0);
    if (f == 0.0f || l0 + 1 >= levels) return a;
    return a * (1.0f - f) + level(l0 + 1) * f;
}

static void near(float got, float want, const char *what, int i) {
    if (fabsf(got - want) > 1e-3f * fmaxf(1.0f, fabsf(want))) {
        printf("FAIL %s[%d]: got %f, want %f\n", what, i, got, want);
        exit(1);
    }
}

static cudaTextureObject_t make_tex(cudaMipmappedArray_t m, cudaTextureFilterMode mip, float bias, float lo, float hi) {
    cudaResourceDesc r = {};
    r.resType = cudaResourceTypeMipmappedArray;
    r.res.mipmap.mipmap = m;
    cudaTextureDesc td = {};
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 1;
    td.mipmapFilterMode = mip;
    td.mipmapLevelBias = bias;
    td.minMipmapLevelClamp = lo;
    td.maxMipmapLevelClamp = hi;
    cudaTextureObject_t t;
    CK(cudaCreateTextureObject(&t, &r, &td, nullptr));
    return t;
}

struct Tex { cudaTextureObject_t t; bool linear; float bias, lo, hi; const char *name; };

static void run_and_check(const Tex *tx, int ntx, cudaTextureObject_t t1, float *dout, float *hout, const float *dlods,
                          float *dgrad, float *hgrad, cudaStream_t s, int gate) {
    for (int k = 0; k < ntx; k++) {
        sample2d<<<NL, dim3(NU, NV), 0, s>>>(tx[k].t, dout + k * NL * NU * NV, dlods, NL);
        CK(cudaGetLastError());
    }
    sample1d<<<NL, NU, 0, s>>>(t1, dout + ntx * NL * NU * NV, dlods);
    sample_grad<<<1, dim3(NU, NV), 0, s>>>(tx[0].t, dgrad);
    int total = ntx * NL * NU * NV + NL * NU;
    CK(cudaMemcpyAsync(hout, dout, total * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaMemcpyAsync(hgrad, dgrad, NU * NV * 4, cudaMemcpyDeviceToHost, s));
    if (gate) GATE(gate);  // sampling queued
    CK(cudaStreamSynchronize(s));
    for (int k = 0; k < ntx; k++)
        for (int l = 0; l < NL; l++)
            for (int v = 0; v < NV; v++)
                for (int u = 0; u < NU; u++) {
                    float fu = (u + 0.3f) / NU, fv = (v + 0.6f) / NV;
                    float want = model(LODS[l], tx[k].bias, tx[k].lo, tx[k].hi, LEVELS, tx[k].linear,
                                       [&](int lv) { return point2d(lv, fu, fv); });
                    int i = ((k * NL + l) * NV + v) * NU + u;
                    near(hout[i], want, tx[k].name, i);
                }
    for (int l = 0; l < NL; l++)
        for (int u = 0; u < NU; u++) {
            float fu = (u + 0.3f) / NU;
            float want = model(LODS[l], 0, 0, LEVELS1 - 1, LEVELS1, true, [&](int lv) { return point1d(lv, fu); });
            int i = ntx * NL * NU * NV + l * NU + u;
            near(hout[i], want, "tex1DLod", i);
        }
    for (int v = 0; v < NV; v++)
        for (int u = 0; u < NU; u++) near(hgrad[v * NU + u], point2d(2, (u + 0.3f) / NU, (v + 0.6f) / NV), "tex2DGrad", v * NU + u);
}

int main() {
    int maxw = 0;
    CK(cudaDeviceGetAttribute(&maxw, cudaDevAttrMaxTexture2DMipmappedWidth, 0));
    EXPECT(maxw >= W);
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaMipmappedArray_t m2, m1;
    CK(cudaMallocMipmappedArray(&m2, &fd, make_cudaExtent(W, H, 0), LEVELS, 0));
    CK(cudaMallocMipmappedArray(&m1, &fd, make_cudaExtent(W1, 0, 0), LEVELS1, 0));
    for (int l = 0; l < LEVELS; l++) {
        cudaArray_t a;
        CK(cudaGetMipmappedArrayLevel(&a, m2, l));
        cudaChannelFormatDesc d;
        cudaExtent e;
        unsigned flags;
        CK(cudaArrayGetInfo(&d, &e, &flags, a));
        EXPECT(e.width == (size_t)(W >> l) && e.height == (size_t)(H >> l) && d.x == 32);
        int w = W >> l, h = H >> l;
        std::vector<float> v(w * h);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) v[y * w + x] = texel(l, x, y);
        CK(cudaMemcpy2DToArray(a, 0, 0, v.data(), w * 4, w * 4, h, cudaMemcpyHostToDevice));
    }
    for (int l = 0; l < LEVELS1; l++) {
        cudaArray_t a;
        CK(cudaGetMipmappedArrayLevel(&a, m1, l));
        int w = W1 >> l;
        std::vector<float> v(w);
        for (int x = 0; x < w; x++) v[x] = texel1(l, x);
        CK(cudaMemcpy2DToArray(a, 0, 0, v.data(), w * 4, w * 4, 1, cudaMemcpyHostToDevice));
    }
    cudaArray_t beyond;
    EXPECT(cudaGetMipmappedArrayLevel(&beyond, m2, LEVELS) == cudaErrorInvalidValue);
    cudaGetLastError();
    GATE(1);  // levels filled

    // Level 2 read back from its array.
    {
        cudaArray_t a;
        CK(cudaGetMipmappedArrayLevel(&a, m2, 2));
        int w = W >> 2, h = H >> 2;
        std::vector<float> v(w * h);
        CK(cudaMemcpy2DFromArray(v.data(), w * 4, a, 0, 0, w * 4, h, cudaMemcpyDeviceToHost));
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) EXPECT(v[y * w + x] == texel(2, x, y));
    }

    Tex tx[] = {
        {make_tex(m2, cudaFilterModeLinear, 0, 0, LEVELS - 1), true, 0, 0, LEVELS - 1, "tex2DLod linear"},
        {make_tex(m2, cudaFilterModePoint, 0, 0, LEVELS - 1), false, 0, 0, LEVELS - 1, "tex2DLod point"},
        {make_tex(m2, cudaFilterModeLinear, 1.0f, 0.5f, 2.0f), true, 1.0f, 0.5f, 2.0f, "tex2DLod bias clamps"},
    };
    const int NT = sizeof(tx) / sizeof(tx[0]);
    cudaResourceDesc r1 = {};
    r1.resType = cudaResourceTypeMipmappedArray;
    r1.res.mipmap.mipmap = m1;
    cudaTextureDesc td1 = {};
    td1.addressMode[0] = cudaAddressModeClamp;
    td1.normalizedCoords = 1;
    td1.mipmapFilterMode = cudaFilterModeLinear;
    td1.maxMipmapLevelClamp = LEVELS1 - 1;
    cudaTextureObject_t t1;
    CK(cudaCreateTextureObject(&t1, &r1, &td1, nullptr));
    cudaResourceDesc back = {};
    CK(cudaGetTextureObjectResourceDesc(&back, tx[0].t));
    EXPECT(back.resType == cudaResourceTypeMipmappedArray && back.res.mipmap.mipmap == m2);

    int total = NT * NL * NU * NV + NL * NU;
    float *dout, *dlods, *dgrad, *hout, *hgrad;
    CK(cudaMalloc(&dout, total * 4));
    CK(cudaMalloc(&dlods, sizeof LODS));
    CK(cudaMalloc(&dgrad, NU * NV * 4));
    CK(cudaMallocHost(&hout, total * 4));
    CK(cudaMallocHost(&hgrad, NU * NV * 4));
    CK(cudaMemcpy(dlods, LODS, sizeof LODS, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    run_and_check(tx, NT, t1, dout, hout, dlods, dgrad, hgrad, s, 2);
    GATE(3);
    // After the gate (and a restart): the same textures over the same levels.
    CK(cudaMemset(dout, 0, total * 4));
    run_and_check(tx, NT, t1, dout, hout, dlods, dgrad, hgrad, s, 0);

    for (int k = 0; k < NT; k++) CK(cudaDestroyTextureObject(tx[k].t));
    CK(cudaDestroyTextureObject(t1));
    CK(cudaFreeMipmappedArray(m2));
    CK(cudaFreeMipmappedArray(m1));
    double sum = 0;
    for (int i = 0; i < total; i++) sum += hout[i];
    printf("mipmap samples %d checksum %.3f\n", total, sum);
    printf("PASS\n");
    return 0;
}
