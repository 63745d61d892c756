/*
 * The installed package, as a user of it sees it: this build tree is
 * installed into a temporary prefix (the install step of "make install"),
 * and a small program is built against it twice, with pkg-config and with
 * CMake's find_package(dlock), each linked with the shared and with the
 * static library, and run against a real redis-server. The flags the
 * package hands out must not carry hiredis's: dlock.h needs none of it.
 *
 * Paths to this build's tools come from tests/CMakeLists.txt.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/redis_proc.h"
#include "harness/test.h"

#ifndef DLOCK_BUILD_DIR
#error "tests/CMakeLists.txt defines the paths this test needs"
#endif

/* The program a user writes first: take a lock, print its token. */
static const char consumer_source[] =
    "#include <dlock.h>\n"
    "#include <stdio.h>\n"
    "int main(int argc, char **argv) {\n"
    "  dlock_options_t o;\n"
    "  dlock_client_t *c;\n"
    "  dlock_t *l;\n"
    "  dlock_options_init(&o);\n"
    "  o.url = argc > 1 ? argv[1] : o.url;\n"
    "  if (dlock_client_open(&o, &c) != 0) {\n"
    "    fprintf(stderr, \"open: %s\\n\", dlock_last_error());\n"
    "    return 1;\n"
    "  }\n"
    "  int rc = dlock_get(c, \"installed\", &l);\n"
    "  if (rc == 0 && (rc = dlock_lock(l, 5000)) == 0) {\n"
    "    printf(\"token %llu\\n\", (unsigned long long)dlock_token(l));\n"
    "    rc = dlock_unlock(l);\n"
    "  }\n"
    "  if (rc != 0)\n"
    "    fprintf(stderr, \"%s: %s\\n\", dlock_err_name(rc), "
    "dlock_last_error());\n"
    "  dlock_free(l);\n"
    "  dlock_client_close(c);\n"
    "  return rc == 0 ? 0 : 2;\n"
    "}\n";

#define STR_(x) #x
#define STR(x) STR_(x)
/* The version of the header being built, which SameMinorVersion accepts. */
static const char consumer_cmake[] =
    "cmake_minimum_required(VERSION 3.25)\n"
    "project(consumer C)\n"
    "find_package(dlock " STR(DLOCK_VERSION_MAJOR) "." STR(
        DLOCK_VERSION_MINOR) " REQUIRED)\n"
                             "add_executable(consumer consumer.c)\n"
                             "target_link_libraries(consumer PRIVATE "
                             "dlock::dlock)\n"
                             "add_executable(consumer_static consumer.c)\n"
                             "target_link_libraries(consumer_static PRIVATE "
                             "dlock::dlock_static)\n";

static char *text_of_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return strdup("");
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  for (int c; (c = fgetc(f)) != EOF;)
    fputc(c, mem);
  fclose(mem);
  fclose(f);
  return buf;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  ASSERT_EQ(fclose(f), 0);
}

/* Runs a shell command line (formatted) with stdout and stderr captured
 * into '*out' (freed by the caller; may be NULL to discard); returns its
 * exit status, printing the output when it is not 0. */
static int sh(char **out, const char *fmt, ...) {
  char *cmd = NULL;
  va_list ap;
  va_start(ap, fmt);
  ASSERT(vasprintf(&cmd, fmt, ap) >= 0);
  va_end(ap);
  char *full = NULL;
  ASSERT(asprintf(&full, "( %s ) 2>&1", cmd) >= 0);
  fflush(NULL);
  FILE *p = popen(full, "r");
  ASSERT_NOT_NULL(p);
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  for (int c; (c = fgetc(p)) != EOF;)
    fputc(c, mem);
  fclose(mem);
  int status = pclose(p);
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  if (rc != 0)
    printf("$ %s\n%s(exit %d)\n", cmd, buf, rc);
  free(cmd);
  free(full);
  if (out != NULL)
    *out = buf;
  else
    free(buf);
  return rc;
}

static void assert_contains(const char *text, const char *needle,
                            const char *what) {
  if (strstr(text, needle) == NULL)
    TEST_FAIL("%s lacks \"%s\": %s", what, needle, text);
}

static void assert_lacks(const char *text, const char *needle,
                         const char *what) {
  if (strstr(text, needle) != NULL)
    TEST_FAIL("%s has \"%s\": %s", what, needle, text);
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* Runs a consumer against 'url'; it must take the lock and say so. */
static void run_consumer(const char *program, const char *url) {
  char *out = NULL;
  ASSERT_EQ(sh(&out, "'%s' '%s'", program, url), 0);
  assert_contains(out, "token ", program);
  free(out);
}

TEST(install_then_build_with_pkg_config_and_cmake) {
  char dir[] = "/tmp/dlock-install-XXXXXX";
  char prefix[256], src[256], bin[256];
  char *pc = NULL;
  char *out = NULL;
  rp_options_t o;
  rp_server_t *s = NULL;

  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(prefix, sizeof prefix, "%s/prefix", dir);
  snprintf(src, sizeof src, "%s/src", dir);
  snprintf(bin, sizeof bin, "%s/bin", dir);
  ASSERT_EQ(mkdir(src, 0755), 0);
  rp_options_init(&o);
  o.unix_socket = 1;
  ASSERT_EQ(rp_start(&o, &s), 0);

  /* The install step of "make install", into the temporary prefix. */
  ASSERT_EQ(sh(NULL, "'%s' --install '%s' --prefix '%s'", DLOCK_CMAKE,
               DLOCK_BUILD_DIR, prefix),
            0);
  /* The command finds its library wherever the tree was installed. */
  ASSERT_EQ(sh(&out, "'%s/bin/dlock' --version", prefix), 0);
  assert_contains(out, "dlock " DLOCK_VERSION_STRING, "dlock --version");
  free(out);

  /* pkg-config, pointed at the installed prefix. */
  ASSERT(asprintf(&pc,
                  "PKG_CONFIG_PATH='%s/%s/pkgconfig' '%s' "
                  "--define-variable=prefix='%s'",
                  prefix, DLOCK_LIBDIR, DLOCK_PKG_CONFIG, prefix) > 0);
  ASSERT_EQ(sh(&out, "%s --cflags dlock", pc), 0);
  assert_contains(out, "-I", "pkg-config --cflags dlock");
  assert_lacks(out, "hiredis", "pkg-config --cflags dlock");
  assert_lacks(out, "_FILE_OFFSET_BITS", "pkg-config --cflags dlock");
  free(out);
  ASSERT_EQ(sh(&out, "%s --libs dlock", pc), 0);
  assert_contains(out, "-ldlock", "pkg-config --libs dlock");
  assert_lacks(out, "hiredis", "pkg-config --libs dlock");
  free(out);
  /* A static link needs hiredis, OpenSSL and threads, and is told so. */
  ASSERT_EQ(sh(&out, "%s --static --libs dlock", pc), 0);
  assert_contains(out, "-lhiredis", "pkg-config --static --libs dlock");
  assert_contains(out, "-lssl", "pkg-config --static --libs dlock");
  assert_contains(out, "-lcrypto", "pkg-config --static --libs dlock");
  assert_contains(out, "-pthread", "pkg-config --static --libs dlock");
  free(out);

  char source[300];
  snprintf(source, sizeof source, "%s/consumer.c", src);
  write_file(source, consumer_source);
  ASSERT_EQ(sh(NULL,
               "cd '%s' && '%s' %s -Wall -Werror consumer.c -o consumer "
               "$(%s --cflags --libs dlock) -Wl,-rpath,'%s/%s'",
               src, DLOCK_CC, DLOCK_CONSUMER_FLAGS, pc, prefix, DLOCK_LIBDIR),
            0);
  ASSERT_EQ(sh(NULL,
               "cd '%s' && '%s' %s -Wall -Werror consumer.c -o consumer_static "
               "$(%s --cflags dlock) $(%s --static --libs dlock | sed "
               "'s/-ldlock/-Wl,-Bstatic -ldlock -Wl,-Bdynamic/')",
               src, DLOCK_CC, DLOCK_CONSUMER_FLAGS, pc, pc),
            0);
  /* The static program does not load libdlock.so. */
  ASSERT_EQ(sh(&out, "ldd '%s/consumer_static'", src), 0);
  assert_lacks(out, "libdlock", "ldd consumer_static");
  free(out);
  char program[300];
  snprintf(program, sizeof program, "%s/consumer", src);
  run_consumer(program, rp_url(s));
  snprintf(program, sizeof program, "%s/consumer_static", src);
  run_consumer(program, rp_url(s));

  /* CMake: find_package(dlock) and its imported targets. */
  snprintf(source, sizeof source, "%s/CMakeLists.txt", src);
  write_file(source, consumer_cmake);
  ASSERT_EQ(sh(NULL,
               "'%s' -S '%s' -B '%s' -DCMAKE_PREFIX_PATH='%s' "
               "-DCMAKE_C_COMPILER='%s' -DCMAKE_C_FLAGS='%s -Wall -Werror' "
               "-DCMAKE_EXE_LINKER_FLAGS='%s' -DCMAKE_BUILD_TYPE=Debug",
               DLOCK_CMAKE, src, bin, prefix, DLOCK_CC, DLOCK_CONSUMER_FLAGS,
               DLOCK_CONSUMER_FLAGS),
            0);
  ASSERT_EQ(sh(NULL, "'%s' --build '%s'", DLOCK_CMAKE, bin), 0);
  /* The compile flags CMake derived from the package: dlock's include
   * directory, nothing of hiredis. */
  char flags_path[300];
  snprintf(flags_path, sizeof flags_path,
           "%s/CMakeFiles/consumer.dir/flags.make", bin);
  char *flags = text_of_file(flags_path);
  assert_contains(flags, prefix, "the consumer's compile flags");
  assert_lacks(flags, "hiredis", "the consumer's compile flags");
  assert_lacks(flags, "_FILE_OFFSET_BITS", "the consumer's compile flags");
  free(flags);
  snprintf(program, sizeof program, "%s/consumer", bin);
  run_consumer(program, rp_url(s));
  snprintf(program, sizeof program, "%s/consumer_static", bin);
  run_consumer(program, rp_url(s));
  ASSERT_EQ(sh(&out, "ldd '%s/consumer_static'", bin), 0);
  assert_lacks(out, "libdlock", "ldd consumer_static (CMake)");
  free(out);

  free(pc);
  rp_free(s);
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
