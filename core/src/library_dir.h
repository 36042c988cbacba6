/*
 * Where libattnhost itself lies (or the executable the core is linked into
 * statically): the install's plugin directory and the plugin scanner are
 * found relative to it, so a relocated install and the build tree (which
 * mirrors it) both work.
 */
#ifndef AH_LIBRARY_DIR_H
#define AH_LIBRARY_DIR_H

/* The absolute, symlink-free directory of this object, ah__malloc'ed; NULL
 * when it cannot be told. Absolute even when the library was loaded by a
 * relative path (dlopen("build/lib/libattnhost.so")), whose dladdr name
 * would otherwise make every derived path depend on the current
 * directory. */
char *ah__library_dir(void);

#endif
