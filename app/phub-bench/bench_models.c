/* SPDX-License-Identifier: BSD-3-Clause */
/* The built-in model layouts (torchvision's parameters in order), layout files, synthetic ones. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/phub_model.h"
#include "phub_bench.h"

/*
 * A model is a table of layers in the order torchvision's modules register them, which is the
 * order of model.parameters() and so the forward order of the keys. Each layer expands into its
 * parameter tensors:
 *   CONV   (bias=False)    <name>.weight                      out * in * kh * kw
 *   CONVB  (bias=True)     <name>.weight, <name>.bias         ... , out
 *   BN     (affine)        <name>.weight, <name>.bias         out, out
 *   LINEAR                 <name>.weight, <name>.bias         out * in, out
 *   BASIC  (Inception's BasicConv2d: conv without bias, then batch norm)
 *                          <name>.conv.weight, <name>.bn.weight, <name>.bn.bias
 * Batch-norm running statistics are buffers, not parameters: they are not exchanged.
 */
enum layer_kind {
	CONV,
	CONVB,
	BN,
	LINEAR,
	BASIC,
};

struct layer {
	const char *name;
	enum layer_kind kind;
	uint32_t in;
	uint32_t out;
	uint32_t kh;
	uint32_t kw;
};

#define L_CONV(n, i, o, h, w)	{ n, CONV, i, o, h, w }
#define L_CONVB(n, i, o, h, w)	{ n, CONVB, i, o, h, w }
#define L_BN(n, c)		{ n, BN, 0, c, 0, 0 }
#define L_LINEAR(n, i, o)	{ n, LINEAR, i, o, 0, 0 }
#define L_BASIC(n, i, o, h, w)	{ n, BASIC, i, o, h, w }

/* ---- ResNet (He et al. 2016; torchvision.models.resnet) ---- */

/* BasicBlock: two 3x3 convolutions; the first of a stage may downsample through a 1x1. */
#define BASIC_BLOCK(p, i, o) \
	L_CONV(p ".conv1", i, o, 3, 3), L_BN(p ".bn1", o), \
	L_CONV(p ".conv2", o, o, 3, 3), L_BN(p ".bn2", o)
#define BASIC_BLOCK_DS(p, i, o) \
	BASIC_BLOCK(p, i, o), L_CONV(p ".downsample.0", i, o, 1, 1), L_BN(p ".downsample.1", o)

/* Bottleneck: 1x1 down to width, 3x3 (torchvision strides here), 1x1 up to 4 * width. */
#define BOTTLENECK(p, i, w) \
	L_CONV(p ".conv1", i, w, 1, 1), L_BN(p ".bn1", w), \
	L_CONV(p ".conv2", w, w, 3, 3), L_BN(p ".bn2", w), \
	L_CONV(p ".conv3", w, 4 * (w), 1, 1), L_BN(p ".bn3", 4 * (w))
#define BOTTLENECK_DS(p, i, w) \
	BOTTLENECK(p, i, w), L_CONV(p ".downsample.0", i, 4 * (w), 1, 1), \
	L_BN(p ".downsample.1", 4 * (w))

#define RESNET_STEM L_CONV("conv1", 3, 64, 7, 7), L_BN("bn1", 64)

static const struct layer resnet18[] = {
	RESNET_STEM,
	BASIC_BLOCK("layer1.0", 64, 64),
	BASIC_BLOCK("layer1.1", 64, 64),
	BASIC_BLOCK_DS("layer2.0", 64, 128),
	BASIC_BLOCK("layer2.1", 128, 128),
	BASIC_BLOCK_DS("layer3.0", 128, 256),
	BASIC_BLOCK("layer3.1", 256, 256),
	BASIC_BLOCK_DS("layer4.0", 256, 512),
	BASIC_BLOCK("layer4.1", 512, 512),
	L_LINEAR("fc", 512, 1000),
};

static const struct layer resnet50[] = {
	RESNET_STEM,
	BOTTLENECK_DS("layer1.0", 64, 64),
	BOTTLENECK("layer1.1", 256, 64),
	BOTTLENECK("layer1.2", 256, 64),
	BOTTLENECK_DS("layer2.0", 256, 128),
	BOTTLENECK("layer2.1", 512, 128),
	BOTTLENECK("layer2.2", 512, 128),
	BOTTLENECK("layer2.3", 512, 128),
	BOTTLENECK_DS("layer3.0", 512, 256),
	BOTTLENECK("layer3.1", 1024, 256),
	BOTTLENECK("layer3.2", 1024, 256),
	BOTTLENECK("layer3.3", 1024, 256),
	BOTTLENECK("layer3.4", 1024, 256),
	BOTTLENECK("layer3.5", 1024, 256),
	BOTTLENECK_DS("layer4.0", 1024, 512),
	BOTTLENECK("layer4.1", 2048, 512),
	BOTTLENECK("layer4.2", 2048, 512),
	L_LINEAR("fc", 2048, 1000),
};

/* ---- VGG-19, configuration E without batch norm (Simonyan and Zisserman 2015) ---- */

static const struct layer vgg19[] = {
	/* features: the index is the module's position in nn.Sequential (ReLU, pools between). */
	L_CONVB("features.0", 3, 64, 3, 3),
	L_CONVB("features.2", 64, 64, 3, 3),
	L_CONVB("features.5", 64, 128, 3, 3),
	L_CONVB("features.7", 128, 128, 3, 3),
	L_CONVB("features.10", 128, 256, 3, 3),
	L_CONVB("features.12", 256, 256, 3, 3),
	L_CONVB("features.14", 256, 256, 3, 3),
	L_CONVB("features.16", 256, 256, 3, 3),
	L_CONVB("features.19", 256, 512, 3, 3),
	L_CONVB("features.21", 512, 512, 3, 3),
	L_CONVB("features.23", 512, 512, 3, 3),
	L_CONVB("features.25", 512, 512, 3, 3),
	L_CONVB("features.28", 512, 512, 3, 3),
	L_CONVB("features.30", 512, 512, 3, 3),
	L_CONVB("features.32", 512, 512, 3, 3),
	L_CONVB("features.34", 512, 512, 3, 3),
	L_LINEAR("classifier.0", 512 * 7 * 7, 4096),
	L_LINEAR("classifier.3", 4096, 4096),
	L_LINEAR("classifier.6", 4096, 1000),
};

/* ---- AlexNet, torchvision's one-tower variant (Krizhevsky 2014) ---- */

static const struct layer alexnet[] = {
	L_CONVB("features.0", 3, 64, 11, 11),
	L_CONVB("features.3", 64, 192, 5, 5),
	L_CONVB("features.6", 192, 384, 3, 3),
	L_CONVB("features.8", 384, 256, 3, 3),
	L_CONVB("features.10", 256, 256, 3, 3),
	L_LINEAR("classifier.1", 256 * 6 * 6, 4096),
	L_LINEAR("classifier.4", 4096, 4096),
	L_LINEAR("classifier.6", 4096, 1000),
};

/* ---- Inception v3 with the auxiliary classifier (Szegedy et al. 2016; torchvision) ---- */

#define INCEPTION_A(p, i, pool) \
	L_BASIC(p ".branch1x1", i, 64, 1, 1), \
	L_BASIC(p ".branch5x5_1", i, 48, 1, 1), \
	L_BASIC(p ".branch5x5_2", 48, 64, 5, 5), \
	L_BASIC(p ".branch3x3dbl_1", i, 64, 1, 1), \
	L_BASIC(p ".branch3x3dbl_2", 64, 96, 3, 3), \
	L_BASIC(p ".branch3x3dbl_3", 96, 96, 3, 3), \
	L_BASIC(p ".branch_pool", i, pool, 1, 1)

#define INCEPTION_B(p, i) \
	L_BASIC(p ".branch3x3", i, 384, 3, 3), \
	L_BASIC(p ".branch3x3dbl_1", i, 64, 1, 1), \
	L_BASIC(p ".branch3x3dbl_2", 64, 96, 3, 3), \
	L_BASIC(p ".branch3x3dbl_3", 96, 96, 3, 3)

#define INCEPTION_C(p, i, c7) \
	L_BASIC(p ".branch1x1", i, 192, 1, 1), \
	L_BASIC(p ".branch7x7_1", i, c7, 1, 1), \
	L_BASIC(p ".branch7x7_2", c7, c7, 1, 7), \
	L_BASIC(p ".branch7x7_3", c7, 192, 7, 1), \
	L_BASIC(p ".branch7x7dbl_1", i, c7, 1, 1), \
	L_BASIC(p ".branch7x7dbl_2", c7, c7, 7, 1), \
	L_BASIC(p ".branch7x7dbl_3", c7, c7, 1, 7), \
	L_BASIC(p ".branch7x7dbl_4", c7, c7, 7, 1), \
	L_BASIC(p ".branch7x7dbl_5", c7, 192, 1, 7), \
	L_BASIC(p ".branch_pool", i, 192, 1, 1)

#define INCEPTION_D(p, i) \
	L_BASIC(p ".branch3x3_1", i, 192, 1, 1), \
	L_BASIC(p ".branch3x3_2", 192, 320, 3, 3), \
	L_BASIC(p ".branch7x7x3_1", i, 192, 1, 1), \
	L_BASIC(p ".branch7x7x3_2", 192, 192, 1, 7), \
	L_BASIC(p ".branch7x7x3_3", 192, 192, 7, 1), \
	L_BASIC(p ".branch7x7x3_4", 192, 192, 3, 3)

#define INCEPTION_E(p, i) \
	L_BASIC(p ".branch1x1", i, 320, 1, 1), \
	L_BASIC(p ".branch3x3_1", i, 384, 1, 1), \
	L_BASIC(p ".branch3x3_2a", 384, 384, 1, 3), \
	L_BASIC(p ".branch3x3_2b", 384, 384, 3, 1), \
	L_BASIC(p ".branch3x3dbl_1", i, 448, 1, 1), \
	L_BASIC(p ".branch3x3dbl_2", 448, 384, 3, 3), \
	L_BASIC(p ".branch3x3dbl_3a", 384, 384, 1, 3), \
	L_BASIC(p ".branch3x3dbl_3b", 384, 384, 3, 1), \
	L_BASIC(p ".branch_pool", i, 192, 1, 1)

static const struct layer inception3[] = {
	L_BASIC("Conv2d_1a_3x3", 3, 32, 3, 3),
	L_BASIC("Conv2d_2a_3x3", 32, 32, 3, 3),
	L_BASIC("Conv2d_2b_3x3", 32, 64, 3, 3),
	L_BASIC("Conv2d_3b_1x1", 64, 80, 1, 1),
	L_BASIC("Conv2d_4a_3x3", 80, 192, 3, 3),
	INCEPTION_A("Mixed_5b", 192, 32),
	INCEPTION_A("Mixed_5c", 256, 64),
	INCEPTION_A("Mixed_5d", 288, 64),
	INCEPTION_B("Mixed_6a", 288),
	INCEPTION_C("Mixed_6b", 768, 128),
	INCEPTION_C("Mixed_6c", 768, 160),
	INCEPTION_C("Mixed_6d", 768, 160),
	INCEPTION_C("Mixed_6e", 768, 192),
	/* Registered between Mixed_6e and Mixed_7a, so its keys sit there in the order. */
	L_BASIC("AuxLogits.conv0", 768, 128, 1, 1),
	L_BASIC("AuxLogits.conv1", 128, 768, 5, 5),
	L_LINEAR("AuxLogits.fc", 768, 1000),
	INCEPTION_D("Mixed_7a", 768),
	INCEPTION_E("Mixed_7b", 1280),
	INCEPTION_E("Mixed_7c", 2048),
	L_LINEAR("fc", 2048, 1000),
};

#define PRESET(m) { #m, m, sizeof(m) / sizeof(m[0]) }

static const struct preset {
	const char *name;
	const struct layer *layers;
	size_t n_layers;
} presets[] = {
	PRESET(resnet18),
	PRESET(resnet50),
	PRESET(vgg19),
	PRESET(alexnet),
	PRESET(inception3),
};

#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

/* The tensors of one layer: their sizes and name suffixes; returns how many (<= 3). */
static unsigned int
layer_expand(const struct layer *l, uint64_t *sizes, const char **suffix)
{
	uint64_t conv = (uint64_t)l->out * l->in * l->kh * l->kw;

	switch (l->kind) {
	case CONV:
		sizes[0] = conv;
		suffix[0] = ".weight";
		return 1;
	case CONVB:
		sizes[0] = conv;
		sizes[1] = l->out;
		suffix[0] = ".weight";
		suffix[1] = ".bias";
		return 2;
	case BN:
		sizes[0] = l->out;
		sizes[1] = l->out;
		suffix[0] = ".weight";
		suffix[1] = ".bias";
		return 2;
	case LINEAR:
		sizes[0] = (uint64_t)l->out * l->in;
		sizes[1] = l->out;
		suffix[0] = ".weight";
		suffix[1] = ".bias";
		return 2;
	case BASIC:
		sizes[0] = conv;
		sizes[1] = l->out;
		sizes[2] = l->out;
		suffix[0] = ".conv.weight";
		suffix[1] = ".bn.weight";
		suffix[2] = ".bn.bias";
		return 3;
	}
	return 0;
}

static struct phub_bench_layout *
layout_alloc(const char *model, uint32_t n_keys, bool names)
{
	struct phub_bench_layout *l;

	l = calloc(1, sizeof(*l));
	if (l == NULL)
		goto fail;
	snprintf(l->model, sizeof(l->model), "%s", model);
	l->n_keys = n_keys;
	l->n_elems = calloc(n_keys, sizeof(*l->n_elems));
	if (l->n_elems == NULL)
		goto fail;
	if (names) {
		l->names = calloc(n_keys, sizeof(*l->names));
		if (l->names == NULL)
			goto fail;
	}
	return l;
fail:
	phub_bench_layout_free(l);
	errno = ENOMEM;
	return NULL;
}

/* total_elems and max_key_elems from n_elems[]. */
static void
layout_sum(struct phub_bench_layout *l)
{
	uint32_t i;

	l->total_elems = 0;
	l->max_key_elems = 0;
	for (i = 0; i < l->n_keys; i++) {
		l->total_elems += l->n_elems[i];
		if (l->n_elems[i] > l->max_key_elems)
			l->max_key_elems = l->n_elems[i];
	}
}

unsigned int
phub_bench_preset_count(void)
{
	return N_PRESETS;
}

const char *
phub_bench_preset_name(unsigned int i)
{
	return i < N_PRESETS ? presets[i].name : NULL;
}

/*
 * A network of Table 3 that has no layer list here: its size in equal keys of at most
 * TABLE3_KEY_ELEMS, the paper's MB (2^20 bytes) of fp32, as phub-plan reads the same name.
 */
#define TABLE3_KEY_ELEMS (UINT32_C(1) << 22)

static struct phub_bench_layout *
layout_table3(const struct phub_model_preset *mp)
{
	uint64_t total = (uint64_t)(phub_model_preset_bytes(mp, PHUB_MODEL_UNITS_PAPER) / 4);
	uint32_t n_keys = (uint32_t)((total + TABLE3_KEY_ELEMS - 1) / TABLE3_KEY_ELEMS);
	struct phub_bench_layout *l;

	l = layout_alloc(mp->name, n_keys, false);
	if (l == NULL)
		return NULL;
	for (uint32_t i = 0; i < n_keys; i++) {
		uint64_t left = total - (uint64_t)i * TABLE3_KEY_ELEMS;

		l->n_elems[i] = left < TABLE3_KEY_ELEMS ? (uint32_t)left : TABLE3_KEY_ELEMS;
	}
	layout_sum(l);
	return l;
}

bool
phub_bench_model_has_layers(const char *name)
{
	const struct phub_model_preset *mp = name != NULL ? phub_model_preset_find(name) : NULL;

	for (unsigned int i = 0; mp != NULL && i < N_PRESETS; i++)
		if (strcmp(mp->name, presets[i].name) == 0)
			return true;
	return false;
}

struct phub_bench_layout *
phub_bench_layout_preset(const char *model)
{
	const struct phub_model_preset *mp;
	const struct preset *p = NULL;
	struct phub_bench_layout *l;
	const char *suffix[3];
	uint64_t sizes[3];
	uint32_t n_keys = 0;
	unsigned int i, j, n;
	size_t k;

	/* Every name of the tree's model table (lib/model), in any case: "resnet50", "RN50". */
	mp = model != NULL ? phub_model_preset_find(model) : NULL;
	if (mp == NULL) {
		errno = ENOENT;
		return NULL;
	}
	for (i = 0; i < N_PRESETS; i++)
		if (strcmp(mp->name, presets[i].name) == 0)
			p = &presets[i];
	if (p == NULL)
		return layout_table3(mp);
	for (k = 0; k < p->n_layers; k++)
		n_keys += layer_expand(&p->layers[k], sizes, suffix);
	l = layout_alloc(p->name, n_keys, true);
	if (l == NULL)
		return NULL;
	n_keys = 0;
	for (k = 0; k < p->n_layers; k++) {
		n = layer_expand(&p->layers[k], sizes, suffix);
		for (j = 0; j < n; j++, n_keys++) {
			/* The largest tensor of the presets (VGG's fc6, 102,760,448) fits. */
			l->n_elems[n_keys] = (uint32_t)sizes[j];
			if (asprintf(&l->names[n_keys], "%s%s", p->layers[k].name, suffix[j]) < 0) {
				l->names[n_keys] = NULL;
				phub_bench_layout_free(l);
				errno = ENOMEM;
				return NULL;
			}
		}
	}
	layout_sum(l);
	return l;
}

struct phub_bench_layout *
phub_bench_layout_synthetic(uint32_t n_keys, uint32_t key_elems)
{
	struct phub_bench_layout *l;
	uint32_t i;

	if (n_keys == 0 || key_elems == 0) {
		errno = EINVAL;
		return NULL;
	}
	l = layout_alloc("synthetic", n_keys, false);
	if (l == NULL)
		return NULL;
	for (i = 0; i < n_keys; i++)
		l->n_elems[i] = key_elems;
	layout_sum(l);
	return l;
}

struct phub_bench_layout *
phub_bench_layout_parse(const char *text, const char *name, char *err, size_t errlen)
{
	struct phub_bench_layout *l = NULL;
	json_error_t jerr;
	json_t *root;
	json_t *v;
	size_t i;

	root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL) {
		snprintf(err, errlen, "%s:%d:%d: %s", name, jerr.line, jerr.column, jerr.text);
		errno = EINVAL;
		return NULL;
	}
	if (!json_is_array(root) || json_array_size(root) == 0) {
		snprintf(err, errlen, "%s: $: expected a non-empty list of key sizes", name);
		errno = EINVAL;
		goto out;
	}
	if (json_array_size(root) > UINT32_MAX) {
		snprintf(err, errlen, "%s: $: too many keys", name);
		errno = EINVAL;
		goto out;
	}
	l = layout_alloc(name, (uint32_t)json_array_size(root), false);
	if (l == NULL)
		goto out;
	json_array_foreach(root, i, v) {
		json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;

		if (n < 1 || n > (json_int_t)UINT32_MAX) {
			snprintf(err, errlen, "%s: $[%zu]: a key size must be an integer in"
				" [1, %u]", name, i, UINT32_MAX);
			phub_bench_layout_free(l);
			l = NULL;
			errno = EINVAL;
			goto out;
		}
		l->n_elems[i] = (uint32_t)n;
	}
	layout_sum(l);
out:
	json_decref(root);
	return l;
}

struct phub_bench_layout *
phub_bench_layout_load(const char *path, char *err, size_t errlen)
{
	struct phub_bench_layout *l = NULL;
	const char *base;
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int e;

	f = fopen(path, "r");
	if (f == NULL) {
		e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		errno = e;
		return NULL;
	}
	/* Layout files are small (a number per key): read it whole and parse it. */
	if (getdelim(&text, &len, '\0', f) < 0) {
		e = ferror(f) ? errno : EINVAL;
		snprintf(err, errlen, "%s: %s", path, ferror(f) ? strerror(e) : "empty file");
		goto out;
	}
	base = strrchr(path, '/');
	l = phub_bench_layout_parse(text, path, err, errlen);
	e = errno;
	if (l != NULL)
		snprintf(l->model, sizeof(l->model), "%s", base != NULL ? base + 1 : path);
out:
	free(text);
	fclose(f);
	if (l == NULL)
		errno = e;
	return l;
}

void
phub_bench_layout_free(struct phub_bench_layout *l)
{
	uint32_t i;

	if (l == NULL)
		return;
	if (l->names != NULL)
		for (i = 0; i < l->n_keys; i++)
			free(l->names[i]);
	free(l->names);
	free(l->n_elems);
	free(l);
}
