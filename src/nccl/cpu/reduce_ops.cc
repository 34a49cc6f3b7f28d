#include "src/nccl/cpu/reduce_ops.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace pitstop::cpunccl {
namespace {

// IEEE binary16 and bfloat16 <-> float (round to nearest even).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf or nan
    return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);
  }
  if (abs >= 0x477ff000) return sign | 0x7c00;  // overflow to inf
  if (abs < 0x38800000) {                       // subnormal or zero
    if (abs < 0x33000000) return sign;
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = abs - 0x38000000;  // rebias exponent
  const uint32_t rem = r & 0x1fff;
  r >>= 13;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return sign | static_cast<uint16_t>(r);
}

float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000)
    return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    return static_cast<T>(a + b);
  }
};
struct Prod {
  template <typename T>
  T operator()(T a, T b) const {
    return static_cast<T>(a * b);
  }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    return std::max(a, b);
  }
};
struct Min {
  template <typename T>
  T operator()(T a, T b) const {
    return std::min(a, b);
  }
};

template <typename T, typename Op>
void Plain(void* out, const void* a, const void* b, size_t n) {
  // memcpy per element: out may alias a or b, and buffers may be unaligned.
  auto* o = static_cast<unsigned char*>(out);
  auto* x = static_cast<const unsigned char*>(a);
  auto* y = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < n; ++i) {
    T u, v;
    std::memcpy(&u, x + i * sizeof(T), sizeof(T));
    std::memcpy(&v, y + i * sizeof(T), sizeof(T));
    const T r = Op()(u, v);
    std::memcpy(o + i * sizeof(T), &r, sizeof(T));
  }
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), typename Op>
void Narrow(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<unsigned char*>(out);
  auto* x = static_cast<const unsigned char*>(a);
  auto* y = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < n; ++i) {
    uint16_t u, v;
    std::memcpy(&u, x + 2 * i, 2);
    std::memcpy(&v, y + 2 * i, 2);
    const uint16_t r = FromF(Op()(ToF(u), ToF(v)));
    std::memcpy(o + 2 * i, &r, 2);
  }
}

template <typename Op>
ReduceFn ForOp(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return &Plain<int8_t, Op>;
    case ncclUint8:
      return &Plain<uint8_t, Op>;
    case ncclInt32:
      return &Plain<int32_t, Op>;
    case ncclUint32:
      return &Plain<uint32_t, Op>;
    case ncclInt64:
      return &Plain<int64_t, Op>;
    case ncclUint64:
      return &Plain<uint64_t, Op>;
    case ncclFloat16:
      return &Narrow<HalfToFloat, FloatToHalf, Op>;
    case ncclFloat32:
      return &Plain<float, Op>;
    case ncclFloat64:
      return &Plain<double, Op>;
    case ncclBfloat16:
      return &Narrow<Bf16ToFloat, FloatToBf16, Op>;
    default:
      return nullptr;
  }
}

template <typename T>
void DividePlain(void* buf, size_t n, int d) {
  auto* p = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    v = static_cast<T>(v / static_cast<T>(d));
    std::memcpy(p + i * sizeof(T), &v, sizeof(T));
  }
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void DivideNarrow(void* buf, size_t n, int d) {
  auto* p = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    v = FromF(ToF(v) / static_cast<float>(d));
    std::memcpy(p + 2 * i, &v, 2);
  }
}

}  // namespace

size_t DataTypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* DataTypeName(ncclDataType_t type) {
  static constexpr const char* kNames[] = {
      "ncclInt8",    "ncclUint8",    "ncclInt32",      "ncclUint32",
      "ncclInt64",   "ncclUint64",   "ncclFloat16",    "ncclFloat32",
      "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  const int i = static_cast<int>(type);
  return i >= 0 && i < ncclNumTypes ? kNames[i] : "ncclUnknown";
}

ReduceFn ReduceFor(ncclDataType_t type, ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
    case ncclAvg:
      return ForOp<Sum>(type);
    case ncclProd:
      return ForOp<Prod>(type);
    case ncclMax:
      return ForOp<Max>(type);
    case ncclMin:
      return ForOp<Min>(type);
    default:
      return nullptr;
  }
}

void DivideInPlace(void* buf, size_t n, ncclDataType_t type, int divisor) {
  switch (type) {
    case ncclInt8:
      return DividePlain<int8_t>(buf, n, divisor);
    case ncclUint8:
      return DividePlain<uint8_t>(buf, n, divisor);
    case ncclInt32:
      return DividePlain<int32_t>(buf, n, divisor);
    case ncclUint32:
      return DividePlain<uint32_t>(buf, n, divisor);
    case ncclInt64:
      return DividePlain<int64_t>(buf, n, divisor);
    case ncclUint64:
      return DividePlain<uint64_t>(buf, n, divisor);
    case ncclFloat16:
      return DivideNarrow<HalfToFloat, FloatToHalf>(buf, n, divisor);
    case ncclFloat32:
      return DividePlain<float>(buf, n, divisor);
    case ncclFloat64:
      return DividePlain<double>(buf, n, divisor);
    case ncclBfloat16:
      return DivideNarrow<Bf16ToFloat, FloatToBf16>(buf, n, divisor);
    default:
      return;
  }
}

}  // namespace pitstop::cpunccl
