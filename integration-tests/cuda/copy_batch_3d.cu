// Batched 3-D copies (cudaMemcpy3DBatchAsync) and a 3-D copy with attributes
// (cudaMemcpy3DWithAttributesAsync): a box of a host volume with padded rows and layers into
// a 3-D CUDA array at an offset, the array back to a tightly packed device buffer, the buffer
// to host; pointer-to-pointer copies (element size 1); array to array; a kernel reads the
// device buffer. Each result is checked against the CPU; errors CUDA documents (zero extent,
// a row length below the width, an operand outside its array, nonzero flags, the legacy
// stream, mismatched element sizes) are checked too. A gate comes with copies queued.
// Checked; PASS.
#include "common.h"
#include <cstring>
#define EXPECT_ERR(x, e) do { cudaError_t r_ = (x); if (r_ != (e)) { \
    printf("FAIL %s:%d %s -> %s (want %s)\n", __FILE__, __LINE__, #x, cudaGetErrorName(r_), cudaGetErrorName(e)); exit(1); } \
    (void)cudaGetLastError(); } while (0)

__global__ void sum(const float *v, int n, float *out) {
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
    atomicAdd(out, s);
}

static cudaMemcpy3DOperand ptr_op(void *p, size_t row, size_t layer) {
    cudaMemcpy3DOperand o = {};
    o.type = cudaMemcpyOperandTypePointer;
    o.op.ptr.ptr = p;
    o.op.ptr.rowLength = row;
    o.op.ptr.layerHeight = layer;
    return o;
}
static cudaMemcpy3DOperand array_op(cudaArray_t a, size_t x, size_t y, size_t z) {
    cudaMemcpy3DOperand o = {};
    o.type = cudaMemcpyOperandTypeArray;
    o.op.array.array = a;
    o.op.array.offset.x = x;
    o.op.array.offset.y = y;
    o.op.array.offset.z = z;
    return o;
}
static cudaMemcpy3DBatchOp op(cudaMemcpy3DOperand src, cudaMemcpy3DOperand dst, size_t w, size_t h, size_t d) {
    cudaMemcpy3DBatchOp o = {};
    o.src = src;
    o.dst = dst;
    o.extent = make_cudaExtent(w, h, d);
    o.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    return o;
}

int main() {
    // Host volume: 20 x 12 x 5 floats with padded rows (row length 20, layer height 12);
    // the box copied is 16 x 8 x 3 from (2, 3, 1).
    const int HW = 20, HH = 12, HD = 5, W = 16, H = 8, D = 3, X0 = 2, Y0 = 3, Z0 = 1;
    const int AW = 24, AH = 10, AD = 4, AX = 5, AY = 1, AZ = 1;  // the array and where the box goes
    static float vol[HD][HH][HW], back[D][H][W];
    for (int z = 0; z < HD; z++)
        for (int y = 0; y < HH; y++)
            for (int x = 0; x < HW; x++) vol[z][y][x] = (float)(z * 1000 + y * 30 + x);
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
    cudaArray_t a, b;
    CK(cudaMalloc3DArray(&a, &cd, make_cudaExtent(AW, AH, AD)));
    CK(cudaMalloc3DArray(&b, &cd, make_cudaExtent(AW, AH, AD)));
    float *packed, *out;
    CK(cudaMalloc(&packed, W * H * D * sizeof(float)));
    CK(cudaMalloc(&out, sizeof(float)));
    CK(cudaMemset(out, 0, sizeof(float)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // 1. host box → array (at an offset), array → array, array → packed device buffer.
    cudaMemcpy3DBatchOp ops[3] = {
        op(ptr_op(&vol[Z0][Y0][X0], HW, HH), array_op(a, AX, AY, AZ), W, H, D),
        op(array_op(a, AX, AY, AZ), array_op(b, 0, 0, 0), W, H, D),
        op(array_op(b, 0, 0, 0), ptr_op(packed, 0, 0), W, H, D),
    };
    // A batch runs in stream order but not in order within itself: three batches.
    for (int i = 0; i < 3; i++) CK(cudaMemcpy3DBatchAsync(1, &ops[i], 0, s));
    sum<<<1, 128, 0, s>>>(packed, W * H * D, out);
    GATE(1);
    // 2. the packed buffer → host with a copy with attributes (bytes, pointer to pointer).
    cudaMemcpy3DBatchOp down = op(ptr_op(packed, 0, 0), ptr_op(back, 0, 0), W * sizeof(float), H, D);
    down.srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    CK(cudaMemcpy3DWithAttributesAsync(&down, 0, s));
    CK(cudaStreamSynchronize(s));
    double want = 0;
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                EXPECT(back[z][y][x] == vol[Z0 + z][Y0 + y][X0 + x]);
                want += vol[Z0 + z][Y0 + y][X0 + x];
            }
    float got = 0;
    CK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got == (float)want);
    GATE(2);

    // 3. errors, each refused before anything is copied.
    cudaMemcpy3DBatchOp bad = ops[0];
    bad.extent.depth = 0;
    EXPECT_ERR(cudaMemcpy3DBatchAsync(1, &bad, 0, s), cudaErrorInvalidValue);  // zero extent
    bad = ops[0];
    bad.src.op.ptr.rowLength = W - 1;
    EXPECT_ERR(cudaMemcpy3DBatchAsync(1, &bad, 0, s), cudaErrorInvalidValue);  // row shorter than the width
    bad = ops[0];
    bad.dst.op.array.offset.x = AW - W + 1;
    EXPECT_ERR(cudaMemcpy3DBatchAsync(1, &bad, 0, s), cudaErrorInvalidValue);  // outside the array
    EXPECT_ERR(cudaMemcpy3DBatchAsync(1, &ops[0], 1, s), cudaErrorInvalidValue);  // flags must be 0
    EXPECT_ERR(cudaMemcpy3DBatchAsync(1, &ops[0], 0, 0), cudaErrorInvalidValue);  // legacy stream
    bad = ops[0];
    bad.srcAccessOrder = (cudaMemcpySrcAccessOrder)0;
    EXPECT_ERR(cudaMemcpy3DBatchAsync(1, &bad, 0, s), cudaErrorInvalidValue);  // no access order
    cudaChannelFormatDesc cd2 = cudaCreateChannelDesc<short>();
    cudaArray_t c;
    CK(cudaMalloc3DArray(&c, &cd2, make_cudaExtent(AW, AH, AD)));
    cudaMemcpy3DBatchOp mixed = op(array_op(a, 0, 0, 0), array_op(c, 0, 0, 0), 4, 4, 1);
    EXPECT_ERR(cudaMemcpy3DBatchAsync(1, &mixed, 0, s), cudaErrorInvalidValue);  // element sizes differ
    // A failed batch copied nothing: the packed buffer still holds the box.
    memset(back, 0, sizeof back);
    CK(cudaMemcpy(back, packed, sizeof back, cudaMemcpyDeviceToHost));
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) EXPECT(back[z][y][x] == vol[Z0 + z][Y0 + y][X0 + x]);
    GATE(3);
    printf("3-D batch copies: %d elements through two arrays and back, %d errors refused\n", W * H * D, 7);
    printf("PASS\n");
    return 0;
}
