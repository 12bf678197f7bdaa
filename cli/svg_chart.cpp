// Static SVG charts for the HTML reports, written as text: no script, no
// fonts or files from elsewhere, so that a report opens anywhere offline.
#include "cli/svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvmesh::cli::svg {

namespace {

// Coordinates to a tenth of a pixel: finer only makes the file larger.
std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

// A number in an attribute, for programs: no suffixes, no rounding.
std::string plain(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

// A tick or cell label: short, and without exponents a reader must decode.
std::string short_number(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a >= 1e6)
    std::snprintf(buf, sizeof(buf), "%gM", std::round(v / 1e5) / 10);
  else if (a >= 1e4)
    std::snprintf(buf, sizeof(buf), "%gk", std::round(v / 1e2) / 10);
  else if (a >= 100 || a == 0)
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  else
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

// Round steps (1, 2 or 5 times a power of ten) from `lo` to at least `hi`,
// about `n` of them.
std::vector<double> linear_ticks(double lo, double hi, int n) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  const double first = std::floor(lo / step) * step;
  for (double t = first; t < hi + step * 0.999; t += step)
    out.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  return out;
}

// The round values (1, 2 or 5 times a power of ten) nearest to v > 0 from
// above and from below: a log axis' ends.
double round_up(double v) {
  const double mag = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= v * (1 - 1e-9)) return m * mag;
  return 10 * mag;
}

double round_down(double v) {
  const double mag = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {5.0, 2.0})
    if (m * mag <= v * (1 + 1e-9)) return m * mag;
  return mag;
}

std::string text(double x, double y, const std::string& content,
                 const char* cls, const char* anchor = "start") {
  return "<text class=\"" + std::string(cls) + "\" x=\"" + px(x) + "\" y=\"" +
         px(y) + "\" text-anchor=\"" + anchor + "\">" + content + "</text>";
}

// `attributes`: more of the <svg>'s, each with a leading space.
std::string open_svg(const std::string& id, int width, double height,
                     const std::string& attributes = "") {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"" +
         escape(id) + "\"" + attributes + " width=\"" + std::to_string(width) +
         "\" height=\"" + px(height) + "\" viewBox=\"0 0 " +
         std::to_string(width) + " " + px(height) + "\" role=\"img\">";
}

std::string no_data(const std::string& id, const std::string& title,
                    int width) {
  return open_svg(id, width, 64) + text(8, 20, escape(title), "title") +
         text(8, 48, "no data", "no-data") + "</svg>";
}

// One axis' mapping from data to pixels.
struct scale {
  double lo, hi, from, to;
  bool log = false;
  double operator()(double v) const {
    const double f = log ? (std::log10(v) - std::log10(lo)) /
                               (std::log10(hi) - std::log10(lo))
                         : (v - lo) / (hi - lo);
    return from + f * (to - from);
  }
};

}  // namespace

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const char* color(size_t i) {
  // Tableau 10: distinct hues of similar weight.
  static const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                  "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                                  "#9c755f", "#bab0ac"};
  return palette[i % 10];
}

namespace {

// A dashed series is a reference, drawn dark apart from the palette; the
// highlighted one has a colour no other series takes.
std::string stroke_of(const series& s, size_t i) {
  return s.highlight ? "#c2185b" : s.dashed ? "#222" : color(i);
}

bool plottable(const line_chart& c, double x, double y) {
  return std::isfinite(x) && std::isfinite(y) && (!c.log_x || x > 0);
}

}  // namespace

double shared_max(const std::vector<line_chart>& charts) {
  double max = 0;
  for (const line_chart& c : charts)
    for (const series& s : c.lines)
      for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
        if (plottable(c, s.x[i], s.y[i])) max = std::max(max, s.y[i]);
  return max;
}

std::string render(const line_chart& c) {
  const auto plottable = [&](double x, double y) {
    return svg::plottable(c, x, y);
  };
  double x_lo = INFINITY, x_hi = -INFINITY, y_hi = 0;
  size_t drawable = 0;
  for (const series& s : c.lines) {
    bool any = false;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!plottable(s.x[i], s.y[i])) continue;
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_hi = std::max(y_hi, s.y[i]);
      any = true;
    }
    drawable += any;
  }
  if (drawable == 0) return no_data(c.id, c.title, c.width);

  const double left = 64, right = c.legend ? 170 : 16, top = 34, bottom = 48;
  const double w = c.width, h = c.height;
  scale xs{x_lo, x_hi, left, w - right, c.log_x};
  std::vector<double> x_ticks;
  if (c.log_x) {
    // Round ends just around the data, and the whole decades between them,
    // but none so near an end that their labels would overlap.
    xs.lo = round_down(x_lo);
    xs.hi = round_up(x_hi);
    if (xs.hi <= xs.lo) xs.hi = round_up(xs.lo * 1.5);
    x_ticks.push_back(xs.lo);
    for (double t = std::pow(10.0, std::ceil(std::log10(xs.lo))); t < xs.hi;
         t *= 10)
      if (std::log10(t / xs.lo) > 0.2 && std::log10(xs.hi / t) > 0.2)
        x_ticks.push_back(t);
    x_ticks.push_back(xs.hi);
  } else {
    x_ticks = linear_ticks(x_lo, x_hi, 6);
    xs.lo = x_ticks.front();
    xs.hi = x_ticks.back();
  }
  const double y_top = c.y_max > 0 ? c.y_max : y_hi > 0 ? y_hi : 1;
  const std::vector<double> y_ticks = linear_ticks(0, y_top, 5);
  const scale ys{0, y_ticks.back(), h - bottom, top};

  std::string out = open_svg(c.id, c.width, h,
                             " data-x-max=\"" + plain(xs.hi) +
                                 "\" data-y-max=\"" + plain(ys.hi) + "\"");
  out += text(left, 20, escape(c.title), "title");
  out += "<g class=\"axes\">";
  for (double t : x_ticks) {
    const double x = xs(t);
    out += "<line class=\"grid\" x1=\"" + px(x) + "\" x2=\"" + px(x) +
           "\" y1=\"" + px(top) + "\" y2=\"" + px(h - bottom) + "\"/>";
    out += text(x, h - bottom + 16, short_number(t), "tick", "middle");
  }
  for (double t : y_ticks) {
    const double y = ys(t);
    out += "<line class=\"grid\" x1=\"" + px(left) + "\" x2=\"" +
           px(w - right) + "\" y1=\"" + px(y) + "\" y2=\"" + px(y) + "\"/>";
    out += text(left - 6, y + 4, short_number(t), "tick", "end");
  }
  out += "<rect class=\"frame\" x=\"" + px(left) + "\" y=\"" + px(top) +
         "\" width=\"" + px(w - right - left) + "\" height=\"" +
         px(h - bottom - top) + "\"/>";
  out += text((left + w - right) / 2, h - 10, escape(c.x_label), "label",
              "middle");
  out += "<text class=\"label\" text-anchor=\"middle\" transform=\"translate(" +
         px(16) + "," + px((top + h - bottom) / 2) + ") rotate(-90)\">" +
         escape(c.y_label) + "</text>";
  out += "</g>";

  const bool any_highlight =
      std::any_of(c.lines.begin(), c.lines.end(),
                  [](const series& s) { return s.highlight; });
  // Beside a highlighted series the others step back: thinner, paler.
  const auto style = [&](const series& s, size_t i, double width) {
    const bool faded = any_highlight && !s.highlight && !s.dashed;
    return " stroke=\"" + stroke_of(s, i) + "\" stroke-width=\"" +
           px(s.highlight ? 2 * width
              : faded     ? 0.75 * width
                          : width) +
           "\"" + (faded ? " stroke-opacity=\"0.55\"" : "") +
           (s.dashed ? " stroke-dasharray=\"5 3\"" : "");
  };
  // The highlighted series last, on top of the others.
  for (bool last : {false, true})
    for (size_t i = 0; i < c.lines.size(); ++i) {
      const series& s = c.lines[i];
      if (s.highlight != last) continue;
      std::string d;
      for (size_t k = 0; k < std::min(s.x.size(), s.y.size()); ++k) {
        if (!plottable(s.x[k], s.y[k])) continue;
        const double y = std::min(s.y[k], ys.hi);  // clipped to the frame
        d += (d.empty() ? "M" : " L") + px(xs(s.x[k])) + "," + px(ys(y));
      }
      if (d.empty()) continue;
      out += std::string("<path class=\"") +
             (s.highlight ? "mark highlight" : "mark") + "\" fill=\"none\"" +
             style(s, i, 1.6) + " d=\"" + d + "\"><title>" + escape(s.name) +
             "</title></path>";
    }
  if (c.legend) {
    double y = top + 8;
    for (size_t i = 0; i < c.lines.size(); ++i) {
      const series& s = c.lines[i];
      const double x = w - right + 14;
      out += "<line" + style(s, i, 3) + " x1=\"" + px(x) + "\" x2=\"" +
             px(x + 18) + "\" y1=\"" + px(y) + "\" y2=\"" + px(y) + "\"/>";
      out += "<text class=\"" +
             std::string(s.highlight ? "legend highlight" : "legend") +
             "\" x=\"" + px(x + 24) + "\" y=\"" + px(y + 4) + "\"" +
             (s.highlight ? " font-weight=\"bold\"" : "") + ">" +
             escape(s.name) + "</text>";
      y += 18;
    }
  }
  return out + "</svg>";
}

std::string render(const stacked_bars& c) {
  if (c.bars.empty()) return no_data(c.id, c.title, c.width);
  const double left = 120, right = 24, top = 56, bottom = 44, bar = 20, gap = 8;
  const double h = top + c.bars.size() * (bar + gap) + bottom;
  double longest = 0;
  for (size_t b = 0; b < c.bars.size(); ++b) {
    double sum = 0;
    if (b < c.values.size())
      for (double v : c.values[b])
        sum += std::max(0.0, v);
    longest = std::max(longest, sum);
  }
  const double max = c.max > 0         ? c.max
                     : longest > 0     ? std::max(longest, c.reference)
                     : c.reference > 0 ? c.reference
                                       : 1;
  const scale xs{0, max, left, c.width - right};

  std::string out = open_svg(c.id, c.width, h);
  out += text(8, 20, escape(c.title), "title");
  double lx = left;
  for (size_t p = 0; p < c.parts.size(); ++p) {
    out += "<rect x=\"" + px(lx) +
           "\" y=\"30\" width=\"12\" height=\"12\" "
           "fill=\"" +
           std::string(color(p)) + "\"/>";
    out += text(lx + 16, 40, escape(c.parts[p]), "legend");
    lx += 28 + 7.5 * static_cast<double>(c.parts[p].size());
  }
  out += "<g class=\"axes\">";
  for (double t : linear_ticks(0, max, 5)) {
    if (t > max * 1.0001) break;
    const double x = xs(t);
    out += "<line class=\"grid\" x1=\"" + px(x) + "\" x2=\"" + px(x) +
           "\" y1=\"" + px(top - 4) + "\" y2=\"" + px(h - bottom) + "\"/>";
    out += text(x, h - bottom + 16, short_number(t), "tick", "middle");
  }
  out += text((left + c.width - right) / 2, h - 8, escape(c.value_label),
              "label", "middle");
  out += "</g>";
  for (size_t b = 0; b < c.bars.size(); ++b) {
    const double y = top + b * (bar + gap);
    out += text(left - 8, y + bar / 2 + 4, escape(c.bars[b]), "tick", "end");
    double at = 0;
    for (size_t p = 0; b < c.values.size() && p < c.values[b].size(); ++p) {
      const double v = std::min(std::max(0.0, c.values[b][p]), max - at);
      if (!(v > 0)) continue;
      out += "<rect class=\"mark\" x=\"" + px(xs(at)) + "\" y=\"" + px(y) +
             "\" width=\"" + px(xs(at + v) - xs(at)) + "\" height=\"" +
             px(bar) + "\" fill=\"" + color(p) + "\"><title>" +
             escape(c.bars[b]) + " " +
             escape(p < c.parts.size() ? c.parts[p] : "") + ": " +
             short_number(c.values[b][p]) + "</title></rect>";
      at += v;
    }
  }
  if (c.reference >= 0 && c.reference <= max) {
    const double x = xs(c.reference);
    out += "<line class=\"reference\" x1=\"" + px(x) + "\" x2=\"" + px(x) +
           "\" y1=\"" + px(top - 4) + "\" y2=\"" + px(h - bottom) + "\"/>";
    out +=
        text(x, h - bottom + 30, escape(c.reference_label), "legend", "middle");
  }
  return out + "</svg>";
}

namespace {

// White to a dark blue: the more (f from 0 to 1), the darker.
std::string heat_fill(double f) {
  char fill[8];
  std::snprintf(fill, sizeof(fill), "#%02x%02x%02x",
                static_cast<int>(255 - f * (255 - 0x1f)),
                static_cast<int>(255 - f * (255 - 0x4e)),
                static_cast<int>(255 - f * (255 - 0x8a)));
  return fill;
}

}  // namespace

std::string render(const heatmap& c) {
  if (c.rows.empty() || c.columns.empty())
    return no_data(c.id, c.title, c.width);
  // Below the cells: the axis label, then the key.
  const double left = 120, right = 16, top = 54, bottom = 70, cell_h = 24;
  const double cell_w = (c.width - left - right) / c.columns.size();
  const double h = top + c.rows.size() * cell_h + bottom;
  double max = 0;
  for (const auto& row : c.values)
    for (double v : row)
      max = std::max(max, v);
  if (!(max > 0)) max = 1;

  std::string out = open_svg(c.id, c.width, h);
  out += text(8, 20, escape(c.title), "title");
  out += text(left - 8, top - 8, escape(c.y_label), "label", "end");
  for (size_t k = 0; k < c.columns.size(); ++k)
    out += text(left + (k + 0.5) * cell_w, top - 8, escape(c.columns[k]),
                "tick", "middle");
  for (size_t r = 0; r < c.rows.size(); ++r) {
    const double y = top + r * cell_h;
    out += text(left - 8, y + cell_h / 2 + 4, escape(c.rows[r]), "tick", "end");
    for (size_t k = 0; k < c.columns.size(); ++k) {
      const double v =
          r < c.values.size() && k < c.values[r].size() ? c.values[r][k] : 0;
      const double f = std::min(1.0, std::max(0.0, v / max));
      const std::string fill = heat_fill(f);
      const double x = left + k * cell_w;
      out += "<rect class=\"mark\" x=\"" + px(x) + "\" y=\"" + px(y) +
             "\" width=\"" + px(cell_w) + "\" height=\"" + px(cell_h) +
             "\" fill=\"" + fill + "\"><title>" + escape(c.rows[r]) + ", " +
             escape(c.columns[k]) + ": " + short_number(v) + "</title></rect>";
      if (cell_w >= 30)
        out += "<text class=\"cell\" x=\"" + px(x + cell_w / 2) + "\" y=\"" +
               px(y + cell_h / 2 + 4) + "\" text-anchor=\"middle\" fill=\"" +
               (f > 0.55 ? "#fff" : "#222") + "\">" + short_number(v) +
               "</text>";
    }
  }
  const double cells_end = top + c.rows.size() * cell_h;
  out += text((left + c.width - right) / 2, cells_end + 22, escape(c.x_label),
              "label", "middle");
  // The key: the colour ramp in steps (a gradient needs url(), which a
  // self-contained page avoids), 0 at its left and the largest value with
  // the unit at its right.
  const int steps = 20;
  const double key_w = 200, key_y = cells_end + 40, step_w = key_w / steps;
  out += "<g class=\"key\">";
  out += text(left - 8, key_y + 10, "0", "tick", "end");
  for (int k = 0; k < steps; ++k)
    out += "<rect x=\"" + px(left + k * step_w) + "\" y=\"" + px(key_y) +
           "\" width=\"" + px(step_w + 0.5) + "\" height=\"12\" fill=\"" +
           heat_fill((k + 0.5) / steps) + "\"/>";
  out += "<rect class=\"frame\" fill=\"none\" stroke=\"#999\" x=\"" + px(left) +
         "\" y=\"" + px(key_y) + "\" width=\"" + px(key_w) +
         "\" height=\"12\"/>";
  out += text(left + key_w + 8, key_y + 10,
              short_number(max) + (c.unit.empty() ? "" : " " + escape(c.unit)),
              "tick");
  out += "</g>";
  return out + "</svg>";
}

}  // namespace kvmesh::cli::svg
