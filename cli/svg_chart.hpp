// Static SVG charts for the HTML reports: lines, stacked bars, heatmaps.
// Hand-written: Debian has no C++ library that draws a chart into an SVG
// string; the reports need a few chart kinds and no JavaScript.
#pragma once

#include <string>
#include <vector>

namespace kvmesh::cli::svg {

// Text from input (policy names, trace paths, labels) made safe inside HTML
// text and attribute values: & < > " ' become entities.
std::string escape(const std::string& text);

// The colour of series i: a qualitative palette that prints and that most
// colour-blind readers can tell apart; it repeats after its 10 colours.
const char* color(size_t i);

// Every chart is one <svg> element with the chart's id; each drawn datum is
// one element of class "mark" (a line's <path>, a bar segment's or a cell's
// <rect>), so that a test can count what was drawn. A chart with nothing to
// draw says "no data" (class "no-data") instead of drawing empty axes.

struct series {
  std::string name;
  std::vector<double> x, y;  // equal lengths; extra values are ignored
  bool dashed = false;       // a bound or reference rather than a result
};

struct line_chart {
  std::string id;
  std::string title;
  std::string x_label;  // with the unit, e.g. "TTFT (ms)"
  std::string y_label;
  bool log_x = false;  // values <= 0 are left out on a log axis
  double y_max = 0;    // 0: from the data; else shared by small multiples
  bool legend = true;
  int width = 760;
  int height = 360;
  std::vector<series> lines;
};

struct stacked_bars {
  std::string id;
  std::string title;
  std::string value_label;         // the horizontal axis, with the unit
  std::vector<std::string> bars;   // one horizontal bar each, top down
  std::vector<std::string> parts;  // the segments of every bar (legend)
  std::vector<std::vector<double>> values;  // [bar][part], >= 0
  double max = 0;                           // 0: the longest bar
  // An optional vertical line across the bars, e.g. a bound to compare with.
  double reference = -1;  // < 0: none
  std::string reference_label;
  int width = 760;
};

struct heatmap {
  std::string id;
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<std::string> rows;            // top down
  std::vector<std::string> columns;         // left to right
  std::vector<std::vector<double>> values;  // [row][column], >= 0
  int width = 760;
};

std::string render(const line_chart& c);
std::string render(const stacked_bars& c);
std::string render(const heatmap& c);

}  // namespace kvmesh::cli::svg
