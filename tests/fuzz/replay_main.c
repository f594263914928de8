/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Replays a fuzz corpus through a libFuzzer entry point without libFuzzer,
 * so that every build (gcc or clang, plain or sanitized) checks that the
 * seeds and every crash ever found still pass.
 */

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
replay_file(const char *path)
{
	struct stat st;
	uint8_t *data;
	FILE *f;
	size_t got;

	f = fopen(path, "rb");
	if (f == NULL || fstat(fileno(f), &st) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		if (f != NULL)
			fclose(f);
		return -1;
	}
	/* One extra byte so that an empty input still has a valid pointer. */
	data = malloc((size_t)st.st_size + 1);
	if (data == NULL) {
		fclose(f);
		return -1;
	}
	got = fread(data, 1, (size_t)st.st_size, f);
	fclose(f);
	LLVMFuzzerTestOneInput(data, got);
	free(data);
	return 0;
}

int
main(int argc, char **argv)
{
	unsigned int replayed = 0;
	int failed = 0;

	for (int i = 1; i < argc; i++) {
		struct dirent *entry;
		DIR *dir = opendir(argv[i]);

		if (dir == NULL) {
			/* A single file, as libFuzzer's own command line allows. */
			failed |= replay_file(argv[i]);
			replayed++;
			continue;
		}
		while ((entry = readdir(dir)) != NULL) {
			char path[4096];

			if (entry->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i], entry->d_name);
			failed |= replay_file(path);
			replayed++;
		}
		closedir(dir);
	}
	printf("replay: %u inputs, %s\n", replayed, failed ? "unreadable files" : "no crash");
	if (replayed == 0) {
		fprintf(stderr, "replay: no corpus given or corpus empty\n");
		return EXIT_FAILURE;
	}
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
