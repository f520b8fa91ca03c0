/* Compiled, not run, by the test deprecated_state_write (tests/CMakeLists.txt): a call of the
 * deprecated ckpt_state_write() must draw the compiler's deprecation warning (docs/api.md
 * "Deprecated"). */
#include "mpickpt/state.h"

int call_it(const ckpt_state *st, const char *dir);
int call_it(const ckpt_state *st, const char *dir)
{
    return ckpt_state_write(st, dir);
}
