/*
 * The version of the library itself, which may differ from the dlock.h a
 * program was compiled with.
 */
#include "dlock.h"

unsigned dlock_version(void) { return DLOCK_VERSION_NUMBER; }

const char *dlock_version_string(void) { return DLOCK_VERSION_STRING; }
