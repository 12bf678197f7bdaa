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
  // The series the others are read against (kvmesh among its peers): drawn
  // last, heavy and in a colour of its own, the others lighter; its path
  // and legend entry have the class "highlight".
  bool highlight = false;
};

struct line_chart {
  std::string id;
  std::string title;
  std::string x_label;  // with the unit, e.g. "TTFT (ms)"
  std::string y_label;
  // Either axis ends at a round value just past the data's largest (1, 2
  // or 5 times a power of ten), so the data fills the frame.
  bool log_x = false;  // values <= 0 are left out on a log axis
  // 0: from the data; else the same for charts compared side by side (see
  // shared_max). The axis ends at the round value at or above it. The
  // <svg>'s data-x-max and data-y-max attributes say where both axes end.
  double y_max = 0;
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

// Its key (class "key") maps the colours to values: from 0 (white), so that
// a light cell is a small count rather than the least of large ones, to the
// largest value, named with `unit`.
struct heatmap {
  std::string id;
  std::string title;
  std::string x_label;
  std::string y_label;
  std::string unit;                         // of the values, e.g. "requests"
  std::vector<std::string> rows;            // top down
  std::vector<std::string> columns;         // left to right
  std::vector<std::vector<double>> values;  // [row][column], >= 0
  int width = 760;
};

// The largest y of every plottable point of `charts`: the y_max that puts
// charts read side by side on one scale.
double shared_max(const std::vector<line_chart>& charts);

std::string render(const line_chart& c);
std::string render(const stacked_bars& c);
std::string render(const heatmap& c);

}  // namespace kvmesh::cli::svg
