// Whether this test binary runs under AddressSanitizer (scripts/run-tests.sh runs the torch-free
// tests a second time so). There the heaviest searches run ten times slower than in Release; the
// tests that only repeat them at scale skip or shrink under it, since the Release run covers them whole
// and lighter tests walk the same code under the sanitizer. gcc says so with __SANITIZE_ADDRESS__,
// clang 14 only through __has_feature.
#pragma once
namespace flexpipe::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
inline constexpr bool kSanitized = __has_feature(address_sanitizer);
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace flexpipe::test
