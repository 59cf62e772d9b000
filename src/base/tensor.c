#include "tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mem.h"

const char *kc_dtype_name(kc_dtype dtype)
{
    switch (dtype) {
    case KC_F16: return "float16";
    case KC_BF16: return "bfloat16";
    case KC_F32: return "float32";
    case KC_F64: return "float64";
    case KC_I8: return "int8";
    case KC_I16: return "int16";
    case KC_I32: return "int32";
    case KC_I64: return "int64";
    case KC_U8: return "uint8";
    case KC_U16: return "uint16";
    case KC_U32: return "uint32";
    case KC_U64: return "uint64";
    case KC_BOOL: return "bool";
    case KC_DTYPE_INVALID: break;
    }
    return "invalid";
}

size_t kc_dtype_size(kc_dtype dtype)
{
    switch (dtype) {
    case KC_I8: case KC_U8: case KC_BOOL: return 1;
    case KC_F16: case KC_BF16: case KC_I16: case KC_U16: return 2;
    case KC_F32: case KC_I32: case KC_U32: return 4;
    case KC_F64: case KC_I64: case KC_U64: return 8;
    case KC_DTYPE_INVALID: break;
    }
    return 0;
}

int64_t kc_shape_count(const kc_shape *shape)
{
    int64_t count = 1;
    int unknown = 0;
    if (shape->rank < 0 || shape->rank > KC_MAX_RANK) {
        kc_fail(KC_ERR_LIMIT, "rank %d outside 0..%d", shape->rank, KC_MAX_RANK);
        return -2;
    }
    for (int i = 0; i < shape->rank; i++) {
        int64_t d = shape->dims[i];
        if (d == -1) {
            unknown = 1;
            continue;
        }
        if (d < 0 || kc_mul_overflows(count, d, &count) || count > KC_MAX_ELEMENTS) {
            kc_fail(KC_ERR_LIMIT, "shape dimension %lld is negative or too large", (long long)d);
            return -2;
        }
    }
    return unknown ? -1 : count;
}

int kc_shape_equal(const kc_shape *a, const kc_shape *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

void kc_shape_format(const kc_shape *shape, char *buf, size_t cap)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < shape->rank && used < cap; i++) {
        if (shape->dims[i] < 0)
            used += (size_t)snprintf(buf + used, cap - used, "%sNone", i ? ", " : "");
        else
            used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "",
                                     (long long)shape->dims[i]);
    }
    if (used < cap)
        snprintf(buf + used, cap - used, shape->rank == 1 ? ",)" : ")");
}

kc_shape kc_shape_make(int rank, const int64_t *dims)
{
    kc_shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    for (int i = 0; i < rank && i < KC_MAX_RANK; i++)
        s.dims[i] = dims[i];
    return s;
}

kc_status kc_tensor_new(kc_dtype dtype, int rank, const int64_t *dims, kc_tensor **out)
{
    *out = NULL;
    if (kc_dtype_size(dtype) == 0)
        return kc_fail(KC_ERR_ARG, "invalid dtype");
    if (rank < 0 || rank > KC_MAX_RANK)
        return kc_fail(KC_ERR_ARG, "rank %d outside 0..%d", rank, KC_MAX_RANK);
    kc_shape shape = kc_shape_make(rank, dims);
    int64_t count = kc_shape_count(&shape);
    if (count == -1)
        return kc_fail(KC_ERR_ARG, "tensor shape has an unknown dimension");
    if (count < 0)
        return KC_ERR_LIMIT;
    kc_tensor *t = kc_calloc(1, sizeof *t);
    if (!t)
        return KC_ERR_NOMEM;
    t->data = kc_calloc((size_t)count, kc_dtype_size(dtype));
    if (!t->data) {
        free(t);
        return KC_ERR_NOMEM;
    }
    t->dtype = dtype;
    t->shape = shape;
    t->owns_data = 1;
    *out = t;
    return KC_OK;
}

kc_tensor *kc_tensor_wrap(kc_dtype dtype, const kc_shape *shape, void *data)
{
    kc_tensor *t = kc_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->dtype = dtype;
    t->shape = *shape;
    t->data = data;
    return t;
}

void kc_tensor_free(kc_tensor *tensor)
{
    if (!tensor)
        return;
    if (tensor->owns_data)
        free(tensor->data);
    free(tensor);
}

kc_dtype kc_tensor_dtype(const kc_tensor *t) { return t->dtype; }
int kc_tensor_rank(const kc_tensor *t) { return t->shape.rank; }
int64_t kc_tensor_dim(const kc_tensor *t, int axis)
{
    return (axis >= 0 && axis < t->shape.rank) ? t->shape.dims[axis] : -1;
}
int64_t kc_tensor_count(const kc_tensor *t) { return kc_shape_count(&t->shape); }
void *kc_tensor_data(kc_tensor *t) { return t->data; }
const void *kc_tensor_cdata(const kc_tensor *t) { return t->data; }

float kc_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) {
                mant <<= 1;
                exp--;
            }
            mant &= 0x3ff;
            bits = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float kc_bf16_to_float(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t kc_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++;
    return (uint16_t)half;
}
