/* test_models.c - the built-in model tables and the CSV parser behind them and user tables.
 *
 * The totals were computed independently from the CSV files in traces/models/ (summing
 * numel), not with the parser under test. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deftsim_model.h"

static const struct {
    const char *name;
    size_t tensors;
    uint64_t params;
    const char *first, *last;
    uint64_t first_numel, last_numel;
} builtins[] = {
    {"resnet18_cifar10", 62, 11173962, "conv1.weight", "linear.bias", 1728, 10},
    {"resnet18_imagenet", 62, 11689512, "conv1.weight", "fc.bias", 9408, 1000},
    {"resnet50_imagenet", 161, 25557032, "conv1.weight", "fc.bias", 9408, 1000},
    {"vgg16_cifar10", 32, 15245130, "features.0.weight", "classifier.6.bias", 1728, 10},
    {"vgg16_imagenet", 32, 138357544, "features.0.weight", "classifier.6.bias", 1728, 1000},
    {"lstm3_wikitext2", 14, 28949319, "encoder.weight", "decoder.bias", 18764850, 28869},
    {"ncf_neumf_ml20m", 12, 31832577, "mf_user_embed.weight", "final.bias", 8863552, 1},
    {"bert_base_uncased", 199, 109482240, "embeddings.word_embeddings.weight", "pooler.dense.bias",
     23440896, 768},
    {"gpt2_small", 148, 124439808, "wte.weight", "ln_f.bias", 38597376, 768},
};
#define NBUILTINS (sizeof builtins / sizeof builtins[0])

Test(models, every_builtin_has_its_totals)
{
    /* A new built-in table needs its totals here too. */
    cr_assert_eq(deftsim_model_builtin_count(), NBUILTINS);
    cr_expect_null(deftsim_model_builtin_name(NBUILTINS));
    for (size_t i = 0; i < NBUILTINS; i++) {
        const char *name = deftsim_model_builtin_name(i);
        size_t j = 0;
        while (j < NBUILTINS && strcmp(builtins[j].name, name)) j++;
        cr_assert_lt(j, NBUILTINS, "built-in '%s' has no expected totals", name);
        deftsim_model *m;
        cr_assert_eq(deftsim_model_builtin(name, &m), DEFTSIM_OK, "%s", deftsim_error_message());
        cr_expect_str_eq(m->name, name);
        cr_expect_eq(m->nlayers, builtins[j].tensors, "%s: %zu tensors", name, m->nlayers);
        cr_expect_eq(m->numel, builtins[j].params, "%s: %llu parameters", name,
                     (unsigned long long)m->numel);
        cr_expect_str_eq(m->layers[0].name, builtins[j].first);
        cr_expect_str_eq(m->layers[m->nlayers - 1].name, builtins[j].last);
        cr_expect_eq(m->layers[0].numel, builtins[j].first_numel);
        cr_expect_eq(m->layers[m->nlayers - 1].numel, builtins[j].last_numel);
        deftsim_model_free(m);
    }
}

/* Offsets lay the tensors end to end in parameter order; numel is the product of the shape. */
Test(models, offsets_and_shapes)
{
    for (size_t i = 0; i < deftsim_model_builtin_count(); i++) {
        deftsim_model *m;
        cr_assert_eq(deftsim_model_load(deftsim_model_builtin_name(i), &m), DEFTSIM_OK);
        uint64_t off = 0;
        for (size_t l = 0; l < m->nlayers; l++) {
            const deftsim_layer *L = &m->layers[l];
            cr_expect_eq(L->offset, off, "%s[%zu] %s", m->name, l, L->name);
            uint64_t prod = 1;
            cr_assert(L->ndim >= 1 && L->ndim <= DEFTSIM_MAX_DIMS);
            for (uint32_t d = 0; d < L->ndim; d++) prod *= L->shape[d];
            cr_expect_eq(prod, L->numel, "%s[%zu] %s", m->name, l, L->name);
            off += L->numel;
        }
        cr_expect_eq(off, m->numel, "%s", m->name);
        deftsim_model_free(m);
    }
    deftsim_model *m;
    cr_assert_eq(deftsim_model_builtin("resnet18_cifar10", &m), DEFTSIM_OK);
    cr_expect_str_eq(m->layers[1].name, "bn1.weight");
    cr_expect_eq(m->layers[1].offset, 1728);
    cr_expect_eq(m->layers[0].ndim, 4);
    cr_expect_eq(m->layers[0].shape[0], 64);
    cr_expect_eq(m->layers[0].shape[3], 3);
    cr_expect_eq(m->layers[61].offset, 11173962 - 10);
    deftsim_model *c;
    cr_assert_eq(deftsim_model_clone(m, &c), DEFTSIM_OK);
    cr_expect_eq(c->numel, m->numel);
    cr_expect_eq(c->nlayers, m->nlayers);
    cr_expect_neq(c->layers[5].name, m->layers[5].name);
    cr_expect_str_eq(c->layers[5].name, m->layers[5].name);
    cr_expect_eq(c->layers[5].offset, m->layers[5].offset);
    deftsim_model_free(c);
    deftsim_model_free(m);
}

Test(models, user_csv_file)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/config/bad", root);
    cr_assert_eq(chdir(dir), 0);
    deftsim_model *m;
    cr_assert_eq(deftsim_model_load("tiny.csv", &m), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_str_eq(m->name, "tiny");
    cr_expect_eq(m->nlayers, 1);
    cr_expect_eq(m->numel, 50);
    deftsim_model_free(m);
    cr_expect_eq(deftsim_model_load("resnet19", &m), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "unknown model 'resnet19' (see 'deftsim models', or give a CSV path)");
    cr_expect_eq(deftsim_model_builtin("tiny.csv", &m), DEFTSIM_E_INPUT);
    cr_expect_null(m);
}

static void bad_csv(const char *text, const char *want)
{
    deftsim_model *m = (deftsim_model *)1;
    deftsim_status st = deftsim_model_parse_csv(text, strlen(text), "t.csv", "t", &m);
    cr_expect_eq(st, DEFTSIM_E_INPUT, "%s", text);
    cr_expect_null(m);
    cr_expect_str_eq(deftsim_error_message(), want, "for:\n%s", text);
}

Test(models, bad_csv)
{
    const char *h = "index,name,shape,numel\n";
    char buf[256];
    bad_csv("", "t.csv: empty model table");
    bad_csv("\n\n", "t.csv: empty model table");
    bad_csv(h, "t.csv: model table has no tensors");
    bad_csv("idx,name,shape,numel\n0,w,3,3\n", "t.csv:1: header must be 'index,name,shape,numel'");
    bad_csv("index,name,shape\n", "t.csv:1: header must be 'index,name,shape,numel'");
    snprintf(buf, sizeof buf, "%s0,a,3,3\n2,b,4,4\n", h);
    bad_csv(buf, "t.csv:3: field 'index': '2' (expected 1: rows in parameter order)");
    snprintf(buf, sizeof buf, "%s1,a,3,3\n", h);
    bad_csv(buf, "t.csv:2: field 'index': '1' (expected 0: rows in parameter order)");
    snprintf(buf, sizeof buf, "%s0,a,3x4,13\n", h);
    bad_csv(buf, "t.csv:2: field 'numel': '13' is not the product of shape 3x4");
    snprintf(buf, sizeof buf, "%s0,a,3x4\n", h);
    bad_csv(buf, "t.csv:2: expected 4 comma-separated fields");
    snprintf(buf, sizeof buf, "%s0,,3,3\n", h);
    bad_csv(buf, "t.csv:2: field 'name': empty");
    snprintf(buf, sizeof buf, "%s0,a,3x0,0\n", h);
    bad_csv(buf, "t.csv:2: field 'shape': dimension in '3x0' is zero or too large");
    snprintf(buf, sizeof buf, "%s0,a,3x,3\n", h);
    bad_csv(buf, "t.csv:2: field 'shape': '3x' ends with 'x'");
    snprintf(buf, sizeof buf, "%s0,a,3*4,12\n", h);
    bad_csv(buf, "t.csv:2: field 'shape': '3*4' is not dimensions joined by 'x'");
}

Test(models, good_csv_with_crlf_and_blank_lines)
{
    const char *text = "index,name,shape,numel\r\n0,w,2x3,6\r\n\r\n1,b,3,3\r\n";
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(text, strlen(text), "t.csv", "t", &m), DEFTSIM_OK,
                 "%s", deftsim_error_message());
    cr_expect_eq(m->nlayers, 2);
    cr_expect_eq(m->numel, 9);
    cr_expect_eq(m->layers[1].offset, 6);
    deftsim_model_free(m);
}
