// Plot widget helpers: nice ticks, log ticks, tick labels and the CSV export format.
#include <gtest/gtest.h>

#include "app/widgets/plot.h"

namespace kvscope::ui {
namespace {

TEST(PlotTicks, LinearTicksAreRoundAndInside) {
  const std::vector<double> t = linear_ticks(0.0, 100.0, 5);
  EXPECT_EQ(t, (std::vector<double>{0, 20, 40, 60, 80, 100}));
  const std::vector<double> u = linear_ticks(0.13, 0.91, 4);
  ASSERT_FALSE(u.empty());
  for (double v : u) {
    EXPECT_GE(v, 0.13);
    EXPECT_LE(v, 0.91);
  }
  EXPECT_TRUE(linear_ticks(1.0, 1.0, 5).empty());
  EXPECT_TRUE(linear_ticks(0.0, NAN, 5).empty());
}

TEST(PlotTicks, LogTicksUseDecadesOrPowersOfTwo) {
  EXPECT_EQ(log_ticks(1.0, 1000.0, AxisUnits::kNumber).front(), 1.0);
  const std::vector<double> tokens = log_ticks(1024.0, 1048576.0, AxisUnits::kTokens);
  EXPECT_EQ(tokens.front(), 1024.0);
  EXPECT_EQ(tokens.back(), 1048576.0);
  EXPECT_EQ(tokens.size(), 11u);  // every power of two across 10 octaves
  EXPECT_TRUE(log_ticks(0.0, 10.0, AxisUnits::kNumber).empty());
}

TEST(PlotTicks, LabelsUseUnits) {
  EXPECT_EQ(format_tick(131072.0, AxisUnits::kTokens), "128K");
  EXPECT_EQ(format_tick(1048576.0, AxisUnits::kTokens), "1M");
  EXPECT_EQ(format_tick(40.0 * 1024 * 1024 * 1024, AxisUnits::kBytes), "40 GiB");
  EXPECT_EQ(format_tick(0.25, AxisUnits::kPercent), "25%");
  EXPECT_EQ(format_tick(2500.0, AxisUnits::kNumber), "2.5k");
}

TEST(PlotCsv, LongFormatWithQuotedLabels) {
  PlotSeries a;
  a.label = "Llama \"70B\"";
  a.x = {1, 2};
  a.y = {10, 20};
  const std::string csv = plot_csv(std::span<const PlotSeries>(&a, 1), "tokens", "bytes");
  EXPECT_EQ(
      csv, "series,\"tokens\",\"bytes\"\n\"Llama \"\"70B\"\"\",1,10\n\"Llama \"\"70B\"\"\",2,20\n");
}

}  // namespace
}  // namespace kvscope::ui
