/* SPDX-License-Identifier: BSD-3-Clause */
/* Test helper: runs phub-plan, checks its exit code, its one-line errors and its JSON's shape. */

/*
 * usage: plan_cli_check EXIT KEYS PHUB_PLAN [ARGS...]
 *   EXIT  the exit code phub-plan must return
 *   KEYS  '-' or comma-separated JSON paths that must exist in stdout (dots between object
 *         keys, numbers for array indexes: "configs.0.samples_per_s"); a path ending in '#'
 *         must be a number
 * A non-zero EXIT also requires exactly one line on stderr, starting with "phub-plan".
 */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

static int
run(char **argv, FILE *out, FILE *err)
{
	pid_t pid;
	int status;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(fileno(out), STDOUT_FILENO);
		dup2(fileno(err), STDERR_FILENO);
		execv(argv[0], argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0)
		return -1;
	if (!WIFEXITED(status))
		return -2;
	return WEXITSTATUS(status);
}

static char *
slurp(FILE *f)
{
	long len;
	char *s;

	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	s = calloc(1, (size_t)len + 1);
	if (s != NULL && len > 0 && fread(s, 1, (size_t)len, f) != (size_t)len) {
		free(s);
		return NULL;
	}
	return s;
}

static int
check_path(json_t *root, char *path)
{
	size_t len = strlen(path);
	bool want_number = len > 0 && path[len - 1] == '#';
	json_t *v = root;
	char *tok, *save = NULL;

	if (want_number)
		path[len - 1] = '\0';
	for (tok = strtok_r(path, ".", &save); tok != NULL && v != NULL;
			tok = strtok_r(NULL, ".", &save)) {
		if (json_is_array(v))
			v = json_array_get(v, strtoul(tok, NULL, 10));
		else
			v = json_object_get(v, tok);
	}
	if (v == NULL)
		return -1;
	if (want_number && !json_is_number(v))
		return -2;
	return 0;
}

int
main(int argc, char **argv)
{
	char *out_s = NULL, *err_s = NULL, *keys, *tok, *save = NULL;
	FILE *out = tmpfile(), *err = tmpfile();
	int want, got, lines = 0, rc = 1;
	json_error_t jerr;
	json_t *root;

	if (argc < 4 || out == NULL || err == NULL) {
		fprintf(stderr, "usage: plan_cli_check EXIT KEYS PHUB_PLAN [ARGS...]\n");
		return 2;
	}
	want = atoi(argv[1]);
	keys = argv[2];
	got = run(argv + 3, out, err);
	out_s = slurp(out);
	err_s = slurp(err);
	if (out_s == NULL || err_s == NULL)
		goto done;
	if (got != want) {
		fprintf(stderr, "exit %d, expected %d\nstdout:\n%s\nstderr:\n%s\n", got, want,
				out_s, err_s);
		goto done;
	}
	if (want != 0) {
		for (char *p = err_s; *p != '\0'; p++)
			lines += *p == '\n';
		if (lines != 1 || strncmp(err_s, "phub-plan", 9) != 0) {
			fprintf(stderr, "expected one line on stderr starting with phub-plan, got:\n%s",
					err_s);
			goto done;
		}
	}
	if (strcmp(keys, "-") != 0) {
		root = json_loads(out_s, 0, &jerr);
		if (root == NULL) {
			fprintf(stderr, "stdout is not JSON (%d:%d: %s):\n%s\n", jerr.line,
					jerr.column, jerr.text, out_s);
			goto done;
		}
		for (tok = strtok_r(keys, ",", &save); tok != NULL;
				tok = strtok_r(NULL, ",", &save)) {
			char path[256];

			snprintf(path, sizeof(path), "%s", tok);
			if (check_path(root, path) != 0) {
				fprintf(stderr, "JSON path %s missing or not a number in:\n%s\n",
						tok, out_s);
				json_decref(root);
				goto done;
			}
		}
		json_decref(root);
	}
	rc = 0;
done:
	free(out_s);
	free(err_s);
	fclose(out);
	fclose(err);
	return rc;
}
