// Routes assertions inside Dear ImGui (the packaged libimgui.a uses assert()) to a test failure
// message that names what was being drawn, instead of a bare abort.
#include <cstdio>
#include <cstdlib>

#include "tests/app/ui_test_support.h"

extern "C" [[noreturn]] void __assert_fail(const char* expr, const char* file, unsigned int line,
                                           const char* function) noexcept {
  std::fprintf(stderr, "\n[  FAILED  ] ImGui assertion while %s:\n  %s\n  at %s:%u (%s)\n",
               kvscope::ui::test::current_activity().c_str(), expr, file, line, function);
  std::fflush(stderr);
  std::_Exit(1);
}
