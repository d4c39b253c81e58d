// Quantities as people write them: every spelling the docs promise reads to the same base value, what
// is not a quantity reads to nothing, and bytes print back in the units they were written in.
#include <cmath>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/quantity.h"

namespace flexpipe {
namespace {

double value(const std::string& text, QuantityKind kind) {
  const std::optional<Quantity> q = parse_quantity(text, kind);
  EXPECT_TRUE(q.has_value()) << text;
  return q ? q->value : -1;
}

TEST(ParseQuantity, SizesInDecimalAndBinaryUnitsAndBareNumbers) {
  EXPECT_EQ(value("80GiB", QuantityKind::Size), 80.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(value("80 GiB", QuantityKind::Size), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(value("18.1GB", QuantityKind::Size), 18.1e9);
  EXPECT_EQ(value("80e9", QuantityKind::Size), 80e9);
  EXPECT_EQ(value("85899345920", QuantityKind::Size), 85899345920.0);
  EXPECT_EQ(value("512B", QuantityKind::Size), 512);
  EXPECT_EQ(value("4kB", QuantityKind::Size), 4000);
  EXPECT_EQ(value("4KB", QuantityKind::Size), 4000);
  EXPECT_EQ(value("4KiB", QuantityKind::Size), 4096);
  EXPECT_EQ(value("1.5TB", QuantityKind::Size), 1.5e12);
  EXPECT_EQ(parse_quantity("80GiB", QuantityKind::Size)->unit, "GiB");
  EXPECT_EQ(parse_quantity("8", QuantityKind::Size)->unit, "");
}

TEST(ParseQuantity, BandwidthsAreSizesPerSecond) {
  EXPECT_EQ(value("900GB/s", QuantityKind::Bandwidth), 900e9);
  EXPECT_EQ(value("64 GiB/s", QuantityKind::Bandwidth), 64.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(value("9e11", QuantityKind::Bandwidth), 9e11);
  EXPECT_TRUE(std::isinf(value("inf", QuantityKind::Bandwidth)));
}

TEST(ParseQuantity, TimesInSecondsWhenAUnitIsGiven) {
  EXPECT_DOUBLE_EQ(value("5ms", QuantityKind::Time), 5e-3);
  EXPECT_DOUBLE_EQ(value("30us", QuantityKind::Time), 30e-6);
  EXPECT_DOUBLE_EQ(value("2s", QuantityKind::Time), 2);
  EXPECT_DOUBLE_EQ(value("1.5min", QuantityKind::Time), 90);
  EXPECT_DOUBLE_EQ(value("250ns", QuantityKind::Time), 250e-9);
  EXPECT_EQ(value("10", QuantityKind::Time), 10);  // a bare number: the reader's own unit
}

TEST(ParseQuantity, RefusesWhatIsNotOneOfItsKind) {
  for (const char* text : {"", " ", "80 GiBs", "GiB", "80gb", "80Gb", "80 G", "80GB/s", "5 mins", "1e", "80  GiB"})
    EXPECT_FALSE(parse_quantity(text, QuantityKind::Size).has_value()) << text;
  for (const char* text : {"900GB", "900GB/h", "900 ms"})
    EXPECT_FALSE(parse_quantity(text, QuantityKind::Bandwidth).has_value()) << text;
  for (const char* text : {"5 mins", "5GB", "5m", "5sec"})
    EXPECT_FALSE(parse_quantity(text, QuantityKind::Time).has_value()) << text;
}

TEST(QuantityRefusal, OneShapeQuotingTheInputPrintably) {
  EXPECT_EQ(quantity_refusal("80 GiBs", "a size", "80GiB, 85.9GB or 85899345920"),
            "'80 GiBs' is not a size; write 80GiB, 85.9GB or 85899345920");
  EXPECT_EQ(quantity_refusal("8\x1b", "a size", "8"), "'8\\x1B' is not a size; write 8");
}

TEST(InTimeUnit, ConvertsWrittenUnitsAndKeepsBareNumbers) {
  EXPECT_DOUBLE_EQ(in_time_unit(*parse_quantity("5ms", QuantityKind::Time), "us", "--link-latency"), 5000);
  EXPECT_DOUBLE_EQ(in_time_unit(*parse_quantity("2s", QuantityKind::Time), "ms", "--link-latency"), 2000);
  EXPECT_EQ(in_time_unit(*parse_quantity("0.5", QuantityKind::Time), "unit", "--link-latency"), 0.5);
  try {
    in_time_unit(*parse_quantity("5ms", QuantityKind::Time), "unit", "--link-latency");
    FAIL() << "a table without a time unit cannot take milliseconds";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "--link-latency: 5ms cannot be converted: the costs measure time in 'unit'; give a bare number in it");
  }
}

TEST(InMemoryUnit, ConvertsToTheTablesSizeUnitOrRefuses) {
  EXPECT_DOUBLE_EQ(in_memory_unit(*parse_quantity("2GiB", QuantityKind::Size), "bytes", "--memory-limit"),
                   2.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(in_memory_unit(*parse_quantity("18.1GB", QuantityKind::Size), "GB", "--memory-limit"), 18.1);
  EXPECT_EQ(in_memory_unit(*parse_quantity("8", QuantityKind::Size), "unit", "--memory-limit"), 8);
  try {
    in_memory_unit(*parse_quantity("8GB", QuantityKind::Size), "unit", "--memory-limit");
    FAIL() << "a table without a memory unit cannot take gigabytes";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "--memory-limit: 8GB cannot be converted: the costs count memory in 'unit'; give a bare number in it");
  }
}

TEST(InBandwidthUnit, ConvertsBytesPerSecondToTheTablesUnitsOrRefuses) {
  // 900e9 bytes per second is 9e8 bytes per millisecond, and 0.9 GB per millisecond.
  EXPECT_DOUBLE_EQ(in_bandwidth_unit(*parse_quantity("900GB/s", QuantityKind::Bandwidth), "bytes", "ms", "link"), 9e8);
  EXPECT_DOUBLE_EQ(in_bandwidth_unit(*parse_quantity("900GB/s", QuantityKind::Bandwidth), "GB", "ms", "link"), 0.9);
  EXPECT_DOUBLE_EQ(in_bandwidth_unit(*parse_quantity("64GiB/s", QuantityKind::Bandwidth), "GiB", "s", "link"), 64);
  EXPECT_EQ(in_bandwidth_unit(*parse_quantity("25", QuantityKind::Bandwidth), "unit", "unit", "link"), 25);
  try {
    in_bandwidth_unit(*parse_quantity("900GB/s", QuantityKind::Bandwidth), "bytes", "unit", "link");
    FAIL() << "a table without a time unit cannot take bytes per second";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "link: 900GB/s cannot be converted: the costs count memory in 'bytes' per 'unit'; give a bare number "
                 "in it");
  }
}

TEST(FormatBytes, InTheUnitsOfTheInputAndNeverZeroKilobytes) {
  EXPECT_EQ(format_bytes(8), "8 B");
  EXPECT_EQ(format_bytes(8, ByteUnits::None), "8");
  EXPECT_EQ(format_bytes(18.1e9), "18.10 GB");
  EXPECT_EQ(format_bytes(2500), "2.5 kB");
  EXPECT_EQ(format_bytes(-3e6), "-3.00 MB");
  EXPECT_EQ(format_bytes(80.0 * 1024 * 1024 * 1024, ByteUnits::Binary), "80.00 GiB");
  EXPECT_EQ(format_bytes(1536, ByteUnits::Binary), "1.5 KiB");
  EXPECT_EQ(byte_units_of(*parse_quantity("80GiB", QuantityKind::Size)), ByteUnits::Binary);
  EXPECT_EQ(byte_units_of(*parse_quantity("80e9", QuantityKind::Size)), ByteUnits::Decimal);
}

TEST(FormatTime, WithTheUnitUnlessTheTableHasNone) {
  EXPECT_EQ(format_time(12.5, "ms"), "12.5 ms");
  EXPECT_EQ(format_time(31, "unit"), "31");
}

}  // namespace
}  // namespace flexpipe
