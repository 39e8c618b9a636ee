/* test_schedule: runs every group listed in groups.h with the compiled-library cache in a
 * fresh temporary directory (STOF_CACHE_DIR), removed at the end; fails if any test fails. */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"
#include "groups.h"

#define DECLARE(name) int run_##name##_tests(void);
STOF_TEST_GROUPS(DECLARE)

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

int main(void) {
  char dir[] = "/tmp/stof-test-schedule-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("STOF_CACHE_DIR", dir, 1);
  int failed = 0;
#define RUN(name) failed += run_##name##_tests();
  STOF_TEST_GROUPS(RUN)
  nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  return failed ? 1 : 0;
}
