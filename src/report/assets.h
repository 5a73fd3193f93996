// The report page's assets, inlined at build time (src/report/CMakeLists.txt
// generates their definitions from src/report/web).
#pragma once

#include <string_view>

namespace tokenscope::report::assets {

std::string_view uplot_js();       // uPlot's IIFE build (defines the global uPlot)
std::string_view uplot_css();      // uPlot's stylesheet
std::string_view uplot_version();  // from its package.json
std::string_view report_js();      // the page's script (src/report/web/report.js)
std::string_view report_css();     // the page's stylesheet (src/report/web/report.css)

}  // namespace tokenscope::report::assets
