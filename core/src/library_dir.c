/* See library_dir.h. */
#include "library_dir.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

char *ah__library_dir(void)
{
    Dl_info info;
    if (!dladdr((void *)ah__library_dir, &info) || !info.dli_fname || !strchr(info.dli_fname, '/'))
        return NULL;
    char *real = realpath(info.dli_fname, NULL);
    if (!real) return NULL;
    *strrchr(real, '/') = '\0';
    char *dir = ah__strdup(real);
    free(real);
    return dir;
}
