/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fuzz target of lib/config: any bytes through phub_config_load_buffer(). A rejected input must
 * leave one terminated message naming the buffer; an accepted one must dump to JSON that loads
 * back and dumps to the same text (so dump and parser agree on every value they accept).
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phub_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *
dump(const struct phub_config *cfg)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f == NULL)
		abort();
	if (phub_config_dump(cfg, f) != 0)
		abort();
	fclose(f);
	return buf;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* drivers_dir and sysfs default to this tree's drivers-cfg and /sys (read-only use). */
	static const struct phub_config_params params = { .name = "fuzz.json" };
	static struct phub_config cfg;
	static struct phub_config again;
	char err[PHUB_CONFIG_ERR_MAX];
	char *first;
	char *second;

	memset(err, 0x55, sizeof(err));
	if (phub_config_load_buffer(data, size, &params, &cfg, err, sizeof(err)) != 0) {
		if (memchr(err, '\0', sizeof(err)) == NULL || strncmp(err, "fuzz.json", 9) != 0)
			abort();
		return 0;
	}
	first = dump(&cfg);
	if (phub_config_load_buffer(first, strlen(first), &params, &again, err, sizeof(err)) != 0) {
		fprintf(stderr, "dump does not load back: %s\n%s", err, first);
		abort();
	}
	second = dump(&again);
	if (strcmp(first, second) != 0) {
		fprintf(stderr, "dump changed on reload:\n%s\n---\n%s", first, second);
		abort();
	}
	free(first);
	free(second);
	phub_config_free(&again);
	phub_config_free(&cfg);
	return 0;
}
