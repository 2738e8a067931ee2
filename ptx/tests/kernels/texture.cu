// Texture fetches through texture objects.
extern "C" __global__ void tex_fetch_1d(cudaTextureObject_t t, float* out, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float>(t, i) * 2.0f;
}

extern "C" __global__ void tex_2d(cudaTextureObject_t t, float* out, int w, int h) {
    int x = threadIdx.x, y = threadIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f) + tex2D<float>(t, x + 1.0f, y + 0.5f) * 1000.0f;
}

extern "C" __global__ void tex_layered(cudaTextureObject_t t, float* out, int w, int layers) {
    int x = threadIdx.x, l = threadIdx.y;
    if (x < w && l < layers) out[l * w + x] = tex1DLayered<float>(t, x + 0.5f, l) + tex2DLayered<float>(t, x + 0.5f, 0.5f, l) * 0.0f;
}

extern "C" __global__ void tex_3d(cudaTextureObject_t t, float* out, int n) {
    int x = threadIdx.x, y = threadIdx.y, z = threadIdx.z;
    out[(z * n + y) * n + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}

extern "C" __global__ void surf_copy_scaled(cudaSurfaceObject_t src, cudaSurfaceObject_t dst, int w, int h) {
    int x = threadIdx.x, y = threadIdx.y;
    if (x < w && y < h) {
        float v = surf2Dread<float>(src, x * 4, y);
        surf2Dwrite(v * 3.0f, dst, x * 4, y);
    }
}
