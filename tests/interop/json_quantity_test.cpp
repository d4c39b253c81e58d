// Times, sizes and bandwidths written with a unit in a hand-written file: converted into the file's
// declared units by hand-computable factors, and refused with one message that names the field.
#include "json_quantity.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "error_text.h"
#include "flexpipe/support/quantity.h"
#include "json_reader.h"

namespace flexpipe::interop {
namespace {

const std::string kOrigin = "costs.json";

double read(const nlohmann::json& value, QuantityKind kind, const DeclaredUnits& units) {
  return quantity_in_declared_units(JsonPathReader(kOrigin), value, "field", kind, units);
}

std::string refusal(const nlohmann::json& value, QuantityKind kind, const DeclaredUnits& units) {
  return test::error_text([&] { read(value, kind, units); });
}

const DeclaredUnits kBytesAndMs{"ms", "bytes"};
const DeclaredUnits kUnitless{};

TEST(QuantityInDeclaredUnits, ConvertsAWrittenUnitIntoTheFilesUnit) {
  // 80 * 1024^3 bytes.
  EXPECT_EQ(read("80GiB", QuantityKind::Size, kBytesAndMs), 85899345920.0);
  // 1.5 * 1024^3 bytes, and the same in a table counted in GiB.
  EXPECT_EQ(read("1.5GiB", QuantityKind::Size, kBytesAndMs), 1610612736.0);
  EXPECT_DOUBLE_EQ(read("1.5GiB", QuantityKind::Size, {"ms", "GiB"}), 1.5);
  // 5e-6 s is 0.005 ms.
  EXPECT_DOUBLE_EQ(read("5us", QuantityKind::Time, kBytesAndMs), 0.005);
  EXPECT_DOUBLE_EQ(read("5 us", QuantityKind::Time, {"s", "bytes"}), 5e-6);
  // 900e9 bytes per second is 9e8 bytes per millisecond, or 0.9 GB per millisecond.
  EXPECT_DOUBLE_EQ(read("900GB/s", QuantityKind::Bandwidth, kBytesAndMs), 9e8);
  EXPECT_DOUBLE_EQ(read("900GB/s", QuantityKind::Bandwidth, {"ms", "GB"}), 0.9);
}

TEST(QuantityInDeclaredUnits, APlainNumberKeepsItsMeaning) {
  EXPECT_EQ(read(80, QuantityKind::Size, kBytesAndMs), 80);
  EXPECT_EQ(read(0.25, QuantityKind::Time, kUnitless), 0.25);
  EXPECT_EQ(read(25, QuantityKind::Bandwidth, kUnitless), 25);
}

TEST(QuantityInDeclaredUnits, RefusesWithTheCommandLinesWordingAndTheFieldsPath) {
  EXPECT_EQ(refusal("80 GiBs", QuantityKind::Size, kBytesAndMs),
            "costs.json: field: '80 GiBs' is not a size; write 80GiB, 1.5GB or a bare number in 'bytes'");
  EXPECT_EQ(refusal("5 sec", QuantityKind::Time, kBytesAndMs),
            "costs.json: field: '5 sec' is not a time; write 5us, 2ms or a bare number in 'ms'");
  EXPECT_EQ(refusal("900GB", QuantityKind::Bandwidth, kBytesAndMs),
            "costs.json: field: '900GB' is not a bandwidth; write 900GB/s, 64GiB/s or a bare number in 'bytes' per "
            "'ms'");
  // A quoted number without a unit is not guessed at.
  EXPECT_EQ(refusal("80", QuantityKind::Size, kBytesAndMs),
            "costs.json: field: '80' is not a size with a unit; write 80GiB, 1.5GB or a bare number in 'bytes'");
  // Only spellings the file can take are suggested.
  EXPECT_EQ(refusal("x", QuantityKind::Time, kUnitless),
            "costs.json: field: 'x' is not a time; write a bare number in 'unit'");
}

TEST(QuantityInDeclaredUnits, RefusesAUnitInAUnitlessFile) {
  EXPECT_EQ(refusal("8GB", QuantityKind::Size, kUnitless),
            "costs.json: field: 8GB cannot be converted: the costs count memory in 'unit'; give a bare number in it");
  EXPECT_EQ(refusal("5ms", QuantityKind::Time, kUnitless),
            "costs.json: field: 5ms cannot be converted: the costs measure time in 'unit'; give a bare number in it");
  EXPECT_EQ(refusal("900GB/s", QuantityKind::Bandwidth, {"unit", "bytes"}),
            "costs.json: field: 900GB/s cannot be converted: the costs count memory in 'bytes' per 'unit'; give a "
            "bare number in it");
}

TEST(QuantityInDeclaredUnits, RefusesNegativeNonFiniteAndHugeQuantities) {
  EXPECT_EQ(refusal("-5us", QuantityKind::Time, kBytesAndMs),
            "costs.json: field: '-5us' is not a time of at least 0; write 5us, 2ms or a bare number in 'ms'");
  EXPECT_EQ(refusal("nanGB", QuantityKind::Size, kBytesAndMs),
            "costs.json: field: 'nanGB' is not a size of at least 0; write 80GiB, 1.5GB or a bare number in 'bytes'");
  EXPECT_EQ(refusal("1e40GB", QuantityKind::Size, kBytesAndMs),
            "costs.json: field: is too large, got '1e40GB' (at most 1e30 in 'bytes')");
  EXPECT_EQ(refusal("infGB/s", QuantityKind::Bandwidth, kBytesAndMs),
            "costs.json: field: is too large, got 'infGB/s' (at most 1e30 in 'bytes' per 'ms')");
  // A plain number is refused as it always was.
  EXPECT_EQ(refusal(-1, QuantityKind::Time, kBytesAndMs), "costs.json: field: must not be negative, got -1");
  EXPECT_EQ(refusal(true, QuantityKind::Time, kBytesAndMs), "costs.json: field: expected a number, got true");
}

}  // namespace
}  // namespace flexpipe::interop
