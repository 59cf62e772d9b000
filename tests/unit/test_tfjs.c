/* TensorFlow.js layers-model reader and the JS-wrapper adapter. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, nftw */
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "format/arrays.h"
#include "format/fileio.h"
#include "format/tfjs.h"

#ifndef KC_TEST_DATA
#error "KC_TEST_DATA must name tests/data"
#endif
#ifndef KC_TEST_TMP
#error "KC_TEST_TMP must name a writable folder"
#endif
#ifndef KC_NSFWJS_DIR
#define KC_NSFWJS_DIR "/nonexistent"
#endif

/* ------------------------------------------------------------ helpers */

/* Unwraps a NUL-terminated snippet. */
static kc_status unwrap(const char *js, char **out, size_t *out_len)
{
    return kc_jswrap_unwrap(js, strlen(js), out, out_len);
}

static void assert_unwraps_to(const char *js, const char *json)
{
    char *out = NULL;
    size_t len = 0;
    kc_status status = unwrap(js, &out, &len);
    if (status != KC_OK)
        print_error("unwrap failed: %s\n", kc_last_error());
    assert_int_equal(status, KC_OK);
    assert_string_equal(out, json);
    assert_int_equal(len, strlen(json));
    free(out);
}

static void assert_unwrap_fails(const char *js, kc_status expected)
{
    char *out = (char *)1;
    size_t len = 7;
    kc_status status = unwrap(js, &out, &len);
    if (status != expected)
        print_error("snippet %s -> %s (%s)\n", js, kc_status_name(status), kc_last_error());
    assert_int_equal(status, expected);
    assert_null(out);
    assert_int_equal(len, 0);
    assert_true(strlen(kc_last_error()) > 0);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* A fresh folder under KC_TEST_TMP for one test; removed in teardown. */
static int make_tmp(void **state)
{
    mkdir(KC_TEST_TMP, 0777); /* the CMake build makes it; a manual build may not */
    char *dir = malloc(sizeof KC_TEST_TMP "/tfjs.XXXXXX");
    if (!dir)
        return -1;
    strcpy(dir, KC_TEST_TMP "/tfjs.XXXXXX");
    if (!mkdtemp(dir)) {
        free(dir);
        return -1;
    }
    *state = dir;
    return 0;
}

static int remove_tmp(void **state)
{
    char *dir = *state;
    if (dir)
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
    return 0;
}

static void write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    write_file(dir, name, text, strlen(text));
}

static const kc_named_array *find_array(const kc_array_list *list, const char *name)
{
    for (int i = 0; i < list->n; i++)
        if (strcmp(list->items[i].name, name) == 0)
            return &list->items[i];
    return NULL;
}

static void assert_shape(const kc_named_array *a, int rank, const int64_t *dims)
{
    assert_int_equal(a->shape.rank, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(a->shape.dims[i], dims[i]);
}

/* Exact float comparison: the fixture values are all representable. */
static void assert_values(const kc_named_array *a, const float *expected, int n)
{
    for (int i = 0; i < n; i++) {
        if (a->data[i] != expected[i])
            print_error("%s[%d] = %.9g, expected %.9g\n", a->name, i, a->data[i], expected[i]);
        assert_true(a->data[i] == expected[i]);
    }
}

typedef struct loaded {
    kc_status status;
    cJSON *doc;
    const cJSON *config;
    char *version;
    kc_array_list arrays;
} loaded;

static loaded load_path(const char *path)
{
    loaded r = {0};
    r.status = kc_tfjs_load(path, &r.doc, &r.config, &r.version, &r.arrays);
    return r;
}

static void loaded_free(loaded *r)
{
    cJSON_Delete(r->doc);
    free(r->version);
    kc_array_list_free(&r->arrays);
}

static void assert_load_fails(loaded *r, kc_status expected, const char *message_part)
{
    if (r->status != expected || !strstr(kc_last_error(), message_part))
        print_error("got %s: %s\n", kc_status_name(r->status), kc_last_error());
    assert_int_equal(r->status, expected);
    assert_non_null(strstr(kc_last_error(), message_part));
    assert_null(r->doc);
    assert_null(r->config);
    assert_null(r->version);
    assert_int_equal(r->arrays.n, 0);
    assert_null(r->arrays.items);
}

/* ------------------------------------------------------------- detect */

static void test_detect(void **state)
{
    (void)state;
    static const char bundle[] = "!function(e){module.exports=e()}(...)";
    static const char cjs[] = "// generated\nmodule.exports = {a: 1};";
    static const char json[] = "{\"note\": \"module.exports\"}";
    static const char bom[] = "\xEF\xBB\xBF  !function(){}";
    assert_int_equal(kc_jswrap_detect(bundle, strlen(bundle)), 1);
    assert_int_equal(kc_jswrap_detect(cjs, strlen(cjs)), 1);
    assert_int_equal(kc_jswrap_detect(json, strlen(json)), 0);
    assert_int_equal(kc_jswrap_detect(bom, strlen(bom)), 1);
    assert_int_equal(kc_jswrap_detect("\x00\x01\x02", 3), 0);
    assert_int_equal(kc_jswrap_detect("", 0), 0);
    assert_int_equal(kc_jswrap_detect("!func", 5), 0);
}

/* ------------------------------------------------------------- unwrap */

static void test_unwrap_object_all_tokens(void **state)
{
    (void)state;
    /* Shaped like an nsfwjs bundle: the bundler's own module.exports=e()
     * comes first and must be skipped. */
    static const char js[] =
        "!function(e){if(\"object\"==typeof exports)module.exports=e();}(function(){"
        "return function e(a,n,i){var r=n[_]={exports:{}};}({1:[function(e,a,n){"
        "a.exports={modelTopology:{keras_version:\"2.2.4\",sparse:!1,trainable:!0,"
        "seed:null,none:void 0,t:true,f:false},"
        "nums:[.5,-.003,123e-21,1E+3,0,-0,5.,0x1F,0o17,0b101,+3,- 2,1.5e-7],"
        "'single':'it\\'s \"q\"',\"esc\":\"a\\\"b\\\\c\\n\\t\\u00e9\\x41\\/\\v\\0\","
        "astral:\"\\u{1F600}\",cont:\"ab\\\ncd\",raw:\"caf\xC3\xA9\",$_k9:1,42:\"n\","
        "/* comment */ trailing:[1,2,],nested:{a:[[],{}],} // end\n"
        "}},{}]},{},[1])(1)});";
    static const char expected[] =
        "{\"modelTopology\":{\"keras_version\":\"2.2.4\",\"sparse\":false,\"trainable\":true,"
        "\"seed\":null,\"none\":null,\"t\":true,\"f\":false},"
        "\"nums\":[0.5,-0.003,123e-21,1E+3,0,-0,5,31,15,5,3,-2,1.5e-7],"
        "\"single\":\"it's \\\"q\\\"\",\"esc\":\"a\\\"b\\\\c\\n\\t\\u00e9\\u0041/\\u000b\\u0000\","
        "\"astral\":\"\\ud83d\\ude00\",\"cont\":\"abcd\",\"raw\":\"caf\xC3\xA9\",\"$_k9\":1,"
        "\"42\":\"n\",\"trailing\":[1,2],\"nested\":{\"a\":[[],{}]}}";
    assert_unwraps_to(js, expected);

    /* The result is strict JSON that cJSON reads back. */
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(unwrap(js, &out, &len), KC_OK);
    cJSON *doc = cJSON_ParseWithLength(out, len);
    assert_non_null(doc);
    const cJSON *nums = cJSON_GetObjectItemCaseSensitive(doc, "nums");
    assert_int_equal(cJSON_GetArraySize(nums), 13);
    assert_true(cJSON_GetArrayItem(nums, 2)->valuedouble == 123e-21);
    const cJSON *astral = cJSON_GetObjectItemCaseSensitive(doc, "astral");
    assert_string_equal(astral->valuestring, "\xF0\x9F\x98\x80");
    cJSON_Delete(doc);
    free(out);
}

static void test_unwrap_spacing_and_control_bytes(void **state)
{
    (void)state;
    assert_unwraps_to("module.exports = { a : [ 1 , 2 ] } ;", "{\"a\":[1,2]}");
    /* A raw tab is legal in a JS string, not in JSON. */
    assert_unwraps_to("module.exports={s:\"a\tb\"}", "{\"s\":\"a\\u0009b\"}");
    assert_unwraps_to("module.exports={s:\"\\u{41}\\u{0}\"}", "{\"s\":\"\\u0041\\u0000\"}");
    assert_unwraps_to("module.exports={s:\"\\uD83D\\uDE00\"}", "{\"s\":\"\\ud83d\\ude00\"}");
    assert_unwraps_to("x.exports={}", "{}");
    assert_unwraps_to("x.exports={a:[]}", "{\"a\":[]}");
}

static void test_unwrap_base64(void **state)
{
    (void)state;
    char *out = NULL;
    size_t len = 0;
    static const char shard[] =
        "!function(e){module.exports=e()}(function(){return function e(h,n,d){}({1:["
        "function(e,h,n){h.exports=\"AAECA/8=\"},{}]},{},[1])(1)});";
    assert_int_equal(unwrap(shard, &out, &len), KC_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(out, "\x00\x01\x02\x03\xff", 5);
    free(out);

    assert_int_equal(unwrap("h.exports=\"QQ==\"", &out, &len), KC_OK);
    assert_int_equal(len, 1);
    assert_memory_equal(out, "A", 1);
    free(out);

    assert_int_equal(unwrap("h.exports='QUJD'", &out, &len), KC_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "ABC", 3);
    free(out);

    assert_int_equal(unwrap("h.exports=\"\"", &out, &len), KC_OK);
    assert_int_equal(len, 0);
    free(out);
}

static void test_unwrap_rejects_code(void **state)
{
    (void)state;
    static const char *const format_errors[] = {
        "a.exports={x:function(){return 1}}",
        "a.exports={x:()=>1}",
        "a.exports={x:process}",
        "a.exports={x:require(\"fs\")}",
        "a.exports={x:(1)}",
        "a.exports={get x(){return 1}}",
        "a.exports={x(){}}",
        "a.exports={[k]:1}",
        "a.exports={x}",
        "a.exports={...o}",
        "a.exports={x:[...o]}",
        "a.exports={x:`hi`}",
        "a.exports={x:/re/}",
        "a.exports={x:1+1}",
        "a.exports={x:\"a\"+\"b\"}",
        "a.exports={x:new Date}",
        "a.exports={x:NaN}",
        "a.exports={x:-Infinity}",
        "a.exports={x:undefined}",
        "a.exports={x:10n}",
        "a.exports={x:1_000}",
        "a.exports={x:017}",
        "a.exports={x:0x}",
        "a.exports={x:1e}",
        "a.exports={x:.}",
        "a.exports={x:1..5}",
        "a.exports={x:!2}",
        "a.exports={x:!a}",
        "a.exports={x:void 1}",
        "a.exports={x:void(0)}",
        "a.exports={x:0x20000000000001}",
        "a.exports={x:[1,,2]}",
        "a.exports={x:[,]}",
        "a.exports={,}",
        "a.exports={x:1 y:2}",
        "a.exports={x:1",
        "a.exports={x:\"abc",
        "a.exports={x:\"ab\ncd\"}",
        "a.exports={x:'abc}",
        "a.exports={x:\"\\",
        "a.exports={x:\"\\1\"}",
        "a.exports={x:\"\\u12\"}",
        "a.exports={x:\"\\xZZ\"}",
        "a.exports={x:\"\\u{110000}\"}",
        "a.exports={x:\"\\u{}\"}",
        "a.exports={x:\"\\ud800\"}",
        "a.exports={x:\"\\udc00\"}",
        "a.exports={x:\"\\ud800x\"}",
        "a.exports={x:\"\\ud800\\n\"}",
        "a.exports={x:\"\\ud800\\ud800\"}",
        "a.exports={x:\"\\u{D800}\"}",
        "a.exports={/* unterminated }",
        "a.exports={\"x\"}",
        "a.exports={007:1}",
        "a.exports={1.5:1}",
        /* base64 shards */
        "h.exports=\"AA*A\"",
        "h.exports=\"AAA\"",
        "h.exports=\"QR==\"",
        "h.exports=\"QUI=QUI=\"",
        "h.exports=\"Q===\"",
        "h.exports=\"QU JD\"",
        "h.exports=\"QU\\nJD\"",
        "h.exports=\"QUJD",
        "h.exports=\"QUJD\nQUJD\"",
        /* nothing to unwrap */
        "!function(e){module.exports=e()}()",
        "module.exports=JSON.parse('{}')",
        "a.exports==\"QUJD\"",
        "",
    };
    for (size_t i = 0; i < sizeof format_errors / sizeof format_errors[0]; i++)
        assert_unwrap_fails(format_errors[i], KC_ERR_FORMAT);

    char *out = NULL;
    size_t len = 0;
    assert_int_equal(unwrap("a.exports={x:function(){}}", &out, &len), KC_ERR_FORMAT);
    assert_non_null(strstr(kc_last_error(), "offset 13"));
}

static char *nested(const char *open, const char *close, int depth)
{
    size_t head = strlen("a.exports="), o = strlen(open), c = strlen(close);
    char *js = malloc(head + (size_t)depth * (o + c) + 2);
    assert_non_null(js);
    char *p = js;
    memcpy(p, "a.exports=", head);
    p += head;
    for (int i = 0; i < depth; i++, p += o)
        memcpy(p, open, o);
    *p++ = '1';
    for (int i = 0; i < depth; i++, p += c)
        memcpy(p, close, c);
    *p = '\0';
    return js;
}

static void test_unwrap_depth_limit(void **state)
{
    (void)state;
    char *out = NULL;
    size_t len = 0;
    char *ok = nested("{a:", "}", 512);
    assert_int_equal(unwrap(ok, &out, &len), KC_OK);
    free(out);
    free(ok);

    char *deep = nested("{a:[", "]}", 300); /* 600 levels */
    assert_int_equal(unwrap(deep, &out, &len), KC_ERR_LIMIT);
    assert_non_null(strstr(kc_last_error(), "nesting"));
    free(deep);

    /* Far deeper than the stack could take if recursion were unbounded. */
    char *hostile = nested("{a:", "}", 1000000);
    assert_int_equal(unwrap(hostile, &out, &len), KC_ERR_LIMIT);
    free(hostile);
}

/* --------------------------------------------------------------- files */

static void test_read_file_errors(void **state)
{
    char *dir = *state;
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(kc_read_file(KC_TEST_DATA "/tfjs/no-such-file", 100, &data, &len), KC_ERR_IO);
    assert_non_null(strstr(kc_last_error(), "tfjs/no-such-file"));
    assert_null(data);

    assert_int_equal(kc_read_file(dir, 100, &data, &len), KC_ERR_IO);
    assert_non_null(strstr(kc_last_error(), "directory"));

    write_text(dir, "ten", "0123456789");
    char path[1024];
    snprintf(path, sizeof path, "%s/ten", dir);
    assert_int_equal(kc_read_file(path, 9, &data, &len), KC_ERR_LIMIT);
    assert_non_null(strstr(kc_last_error(), path));
    assert_int_equal(kc_read_file(path, 10, &data, &len), KC_OK);
    assert_int_equal(len, 10);
    assert_int_equal(data[10], '\0');
    assert_string_equal(data, "0123456789");
    free(data);

    /* A wrapped file that does not unwrap names the file. */
    write_text(dir, "bad.min.js", "!function(){module.exports={x:alert(1)}}()");
    snprintf(path, sizeof path, "%s/bad", dir);
    assert_int_equal(kc_read_model_file(path, 1000, &data, &len), KC_ERR_FORMAT);
    assert_non_null(strstr(kc_last_error(), "bad: JS payload"));
    assert_null(data);

    snprintf(path, sizeof path, "%s/missing", dir);
    assert_int_equal(kc_read_model_file(path, 1000, &data, &len), KC_ERR_IO);
    assert_non_null(strstr(kc_last_error(), "missing: cannot open"));
}

/* ------------------------------------------------------------- fixture */

static void test_fixture_model(void **state)
{
    (void)state;
    loaded r = load_path(KC_TEST_DATA "/tfjs/model.json");
    if (r.status != KC_OK)
        print_error("%s\n", kc_last_error());
    assert_int_equal(r.status, KC_OK);
    assert_string_equal(r.version, "2.15.0");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(r.config, "class_name")->valuestring,
                        "Sequential");
    assert_int_equal(r.arrays.n, 7);
    /* Manifest order is kept. */
    assert_string_equal(r.arrays.items[0].name, "dense/kernel");
    assert_string_equal(r.arrays.items[6].name, "counts");

    const kc_named_array *a = find_array(&r.arrays, "dense/kernel");
    assert_shape(a, 2, (const int64_t[]){2, 3});
    assert_values(a, (const float[]){0.5f, -1.25f, 2.0f, 3.75f, -0.125f, 100.0f}, 6);
    assert_int_equal(a->stored_dtype, KC_F32);
    assert_int_equal(a->stored_bytes, 24);

    a = find_array(&r.arrays, "dense/bias");
    assert_shape(a, 1, (const int64_t[]){3});
    assert_values(a, (const float[]){-1.0f, 0.0f, 126.5f}, 3);
    assert_int_equal(a->stored_dtype, KC_U8);
    assert_int_equal(a->stored_bytes, 3);

    a = find_array(&r.arrays, "bn/gamma"); /* straddles the two shards */
    assert_values(a, (const float[]){1.25f, 125.25f}, 2);
    assert_int_equal(a->stored_dtype, KC_U16);
    assert_int_equal(a->stored_bytes, 4);

    a = find_array(&r.arrays, "bn/beta");
    assert_values(a, (const float[]){1.0f, -2.0f, 0.333251953125f, 5.9604644775390625e-8f}, 4);
    assert_int_equal(a->stored_dtype, KC_F16);
    assert_int_equal(a->stored_bytes, 8);

    a = find_array(&r.arrays, "optimizer/step");
    assert_int_equal(a->shape.rank, 0);
    assert_values(a, (const float[]){-7.0f}, 1);
    assert_int_equal(a->stored_dtype, KC_I32);

    a = find_array(&r.arrays, "mask");
    assert_values(a, (const float[]){1.0f, 0.0f, 1.0f}, 3);
    assert_int_equal(a->stored_dtype, KC_BOOL);

    a = find_array(&r.arrays, "counts"); /* int32 from uint8: Math.round(q*0.25-0.5) */
    assert_values(a, (const float[]){0.0f, 1.0f, 1.0f}, 3);
    assert_int_equal(a->stored_dtype, KC_U8);
    loaded_free(&r);
}

/* A list that already holds arrays is appended to, not replaced. */
static void test_append_to_list(void **state)
{
    (void)state;
    loaded first = load_path(KC_TEST_DATA "/tfjs/model.json");
    assert_int_equal(first.status, KC_OK);
    loaded second = {0};
    second.arrays = first.arrays;
    first.arrays = (kc_array_list){0};
    second.status = kc_tfjs_load(KC_TEST_DATA "/tfjs/model.json", &second.doc, &second.config,
                                 &second.version, &second.arrays);
    assert_int_equal(second.status, KC_OK);
    assert_int_equal(second.arrays.n, 14);
    assert_string_equal(second.arrays.items[7].name, "dense/kernel");
    assert_values(&second.arrays.items[13], (const float[]){0.0f, 1.0f, 1.0f}, 3);

    /* A failing load leaves the caller's arrays as they were. */
    loaded third = {0};
    third.arrays = second.arrays;
    second.arrays = (kc_array_list){0};
    third.status = kc_tfjs_load(KC_TEST_DATA "/tfjs/no-such-model.json", &third.doc, &third.config,
                                &third.version, &third.arrays);
    assert_int_equal(third.status, KC_ERR_IO);
    assert_int_equal(third.arrays.n, 14);
    loaded_free(&first);
    loaded_free(&second);
    loaded_free(&third);
}

static const char small_model_head[] =
    "{\"format\":\"layers-model\",\"modelTopology\":{\"class_name\":\"Sequential\","
    "\"config\":{\"name\":\"s\",\"layers\":[]},\"keras_version\":\"tfjs-layers 4.22.0\"},"
    "\"weightsManifest\":[{\"paths\":";

static void write_small_model(const char *dir, const char *paths, const char *weights)
{
    char json[2048];
    snprintf(json, sizeof json, "%s%s,\"weights\":%s}]}", small_model_head, paths, weights);
    write_text(dir, "model.json", json);
}

static loaded load_in(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return load_path(path);
}

static void test_size_mismatch(void **state)
{
    char *dir = *state;
    write_file(dir, "w.bin", "\0\0\x80\x3f", 4);
    write_small_model(dir, "[\"w.bin\"]",
                      "[{\"name\":\"k\",\"shape\":[2],\"dtype\":\"float32\"}]");
    loaded r = load_in(dir, "model.json");
    assert_load_fails(&r, KC_ERR_FORMAT, "weights manifest needs 8 bytes, shards hold 4");
    assert_non_null(strstr(kc_last_error(), "model.json"));

    /* Too many bytes is as wrong as too few. */
    write_small_model(dir, "[\"w.bin\",\"w.bin\",\"w.bin\"]",
                      "[{\"name\":\"k\",\"shape\":[2],\"dtype\":\"float32\"}]");
    r = load_in(dir, "model.json");
    assert_load_fails(&r, KC_ERR_FORMAT, "weights manifest needs 8 bytes, shards hold 12");

    /* ... and the same manifest with two shards loads. */
    write_small_model(dir, "[\"w.bin\",\"w.bin\"]",
                      "[{\"name\":\"k\",\"shape\":[2],\"dtype\":\"float32\"}]");
    r = load_in(dir, "model.json");
    assert_int_equal(r.status, KC_OK);
    assert_string_equal(r.version, "tfjs-layers 4.22.0");
    assert_int_equal(r.arrays.n, 1);
    assert_values(&r.arrays.items[0], (const float[]){1.0f, 1.0f}, 2);
    loaded_free(&r);

    /* A missing shard is an I/O error naming it. */
    write_small_model(dir, "[\"w.bin\",\"gone.bin\"]",
                      "[{\"name\":\"k\",\"shape\":[2],\"dtype\":\"float32\"}]");
    r = load_in(dir, "model.json");
    assert_load_fails(&r, KC_ERR_IO, "gone.bin: cannot open");
}

static void test_path_escapes_refused(void **state)
{
    char *dir = *state;
    static const char *const bad[] = {
        "[\"../tfjs/group1-shard1of2.bin\"]", "[\"a/../../x.bin\"]", "[\"a/..\"]",
        "[\"..\"]", "[\"/etc/passwd\"]", "[\"\"]", "[7]",
    };
    static const char *const why[] = {
        "leaves the model directory", "leaves the model directory", "leaves the model directory",
        "leaves the model directory", "is absolute", "empty weight file path", "not a string",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_small_model(dir, bad[i], "[{\"name\":\"k\",\"shape\":[1],\"dtype\":\"float32\"}]");
        loaded r = load_in(dir, "model.json");
        assert_load_fails(&r, KC_ERR_FORMAT, why[i]);
    }
    /* '..' inside a name is not a parent-directory component. */
    write_file(dir, "a..b", "\0\0\0\0", 4);
    write_small_model(dir, "[\"./a..b\"]", "[{\"name\":\"k\",\"shape\":[1],\"dtype\":\"int32\"}]");
    loaded r = load_in(dir, "model.json");
    assert_int_equal(r.status, KC_OK);
    loaded_free(&r);
}

/* -------------------------------------------------- in-memory manifests */

typedef struct mem_shards {
    const char *bytes;
    size_t len;
    int calls;
} mem_shards;

/* Every path reads as the same bytes. */
static kc_status mem_reader(void *ctx, const char *rel_path, size_t max_bytes, char **data,
                            size_t *len)
{
    mem_shards *m = ctx;
    (void)rel_path;
    m->calls++;
    if (m->len > max_bytes)
        return kc_fail(KC_ERR_LIMIT, "too big");
    *data = malloc(m->len + 1);
    if (!*data)
        return KC_ERR_NOMEM;
    memcpy(*data, m->bytes, m->len);
    *len = m->len;
    return KC_OK;
}

static loaded load_mem(const char *json, const char *bytes, size_t len)
{
    mem_shards m = {bytes, len, 0};
    loaded r = {0};
    r.status = kc_tfjs_load_json("mem.json", json, strlen(json), mem_reader, &m, &r.doc, &r.config,
                                 &r.version, &r.arrays);
    return r;
}

static loaded load_mem_weights(const char *weights, const char *bytes, size_t len)
{
    char json[2048];
    snprintf(json, sizeof json, "%s[\"s.bin\"],\"weights\":%s}]}", small_model_head, weights);
    return load_mem(json, bytes, len);
}

static void test_bad_manifests(void **state)
{
    (void)state;
    static const char zeros[64] = {0};
    static const struct {
        const char *weights;
        size_t bytes;
        kc_status status;
        const char *message;
    } cases[] = {
        {"[{\"name\":\"s\",\"shape\":[1],\"dtype\":\"string\"}]", 8, KC_ERR_UNSUPPORTED,
         "weight 's': dtype 'string' weights are not supported"},
        {"[{\"name\":\"c\",\"shape\":[1],\"dtype\":\"complex64\"}]", 8, KC_ERR_UNSUPPORTED,
         "complex64"},
        {"[{\"name\":\"x\",\"shape\":[1],\"dtype\":\"float64\"}]", 8, KC_ERR_FORMAT,
         "unknown dtype 'float64'"},
        {"[{\"name\":\"x\",\"shape\":[-1],\"dtype\":\"float32\"}]", 0, KC_ERR_FORMAT,
         "non-negative integer"},
        {"[{\"name\":\"x\",\"shape\":[1.5],\"dtype\":\"float32\"}]", 0, KC_ERR_FORMAT,
         "non-negative integer"},
        {"[{\"name\":\"x\",\"shape\":[\"2\"],\"dtype\":\"float32\"}]", 0, KC_ERR_FORMAT,
         "non-negative integer"},
        {"[{\"name\":\"x\",\"shape\":[1,1,1,1,1,1,1,1,1],\"dtype\":\"float32\"}]", 4,
         KC_ERR_LIMIT, "rank 9"},
        {"[{\"name\":\"x\",\"shape\":[1048576,1048576,1048576],\"dtype\":\"float32\"}]", 0,
         KC_ERR_LIMIT, "too large"},
        {"[{\"name\":\"x\",\"shape\":[1099511627776],\"dtype\":\"float32\"}]", 0, KC_ERR_LIMIT,
         "more than"},
        {"[{\"name\":\"x\",\"shape\":1,\"dtype\":\"float32\"}]", 4, KC_ERR_FORMAT, "not an array"},
        {"[{\"shape\":[1],\"dtype\":\"float32\"}]", 4, KC_ERR_FORMAT, "weight 0: no 'name'"},
        {"[{\"name\":\"q\",\"shape\":[1],\"dtype\":\"float32\",\"quantization\":"
         "{\"dtype\":\"uint8\",\"min\":0}}]",
         1, KC_ERR_FORMAT, "'scale' is missing"},
        {"[{\"name\":\"q\",\"shape\":[1],\"dtype\":\"float32\",\"quantization\":"
         "{\"dtype\":\"uint8\",\"min\":1e999,\"scale\":1}}]",
         1, KC_ERR_FORMAT, "'min' is missing or not a finite number"},
        {"[{\"name\":\"q\",\"shape\":[1],\"dtype\":\"float32\",\"quantization\":"
         "{\"dtype\":\"int8\",\"min\":0,\"scale\":1}}]",
         1, KC_ERR_FORMAT, "unknown quantization dtype 'int8'"},
        {"[{\"name\":\"q\",\"shape\":[1],\"dtype\":\"int32\",\"quantization\":"
         "{\"dtype\":\"float16\"}}]",
         2, KC_ERR_FORMAT, "float16 quantization of a int32 weight"},
        {"[{\"name\":\"q\",\"shape\":[1],\"dtype\":\"bool\",\"quantization\":"
         "{\"dtype\":\"uint8\",\"min\":0,\"scale\":1}}]",
         1, KC_ERR_FORMAT, "quantization of a bool weight"},
        {"[{\"name\":\"d\",\"shape\":[1],\"dtype\":\"int32\"},"
         "{\"name\":\"d\",\"shape\":[1],\"dtype\":\"int32\"}]",
         8, KC_ERR_FORMAT, "weight 'd' appears twice"},
        {"{}", 0, KC_ERR_FORMAT, "'weights' is not an array"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        loaded r = load_mem_weights(cases[i].weights, zeros, cases[i].bytes);
        assert_load_fails(&r, cases[i].status, cases[i].message);
        assert_non_null(strstr(kc_last_error(), "mem.json: "));
    }
}

static void test_bad_documents(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        kc_status status;
        const char *message;
    } cases[] = {
        {"{\"format\":\"graph-model\",\"modelTopology\":{\"node\":[]}}", KC_ERR_UNSUPPORTED,
         "mem.json: a TensorFlow graph model, not a Keras layers model"},
        {"{\"modelTopology\":{\"node\":[],\"versions\":{}}}", KC_ERR_UNSUPPORTED,
         "a TensorFlow graph model"},
        {"{\"format\":\"other\",\"modelTopology\":{\"class_name\":\"Model\"}}", KC_ERR_UNSUPPORTED,
         "not \"layers-model\""},
        {"{\"format\":\"layers-model\"}", KC_ERR_FORMAT, "no 'modelTopology'"},
        {"{\"modelTopology\":{\"model_config\":{\"config\":{}}}}", KC_ERR_FORMAT, "class_name"},
        {"{\"modelTopology\":{\"model_config\":[]}}", KC_ERR_FORMAT, "class_name"},
        {"{\"modelTopology\":{\"class_name\":\"Model\"},\"weightsManifest\":{}}", KC_ERR_FORMAT,
         "'weightsManifest' is not an array"},
        {"{\"modelTopology\":{\"class_name\":\"Model\"},\"weightsManifest\":[7]}", KC_ERR_FORMAT,
         "group 0: not an object"},
        {"{\"modelTopology\":{\"class_name\":\"Model\"},\"weightsManifest\":[{\"weights\":[]}]}",
         KC_ERR_FORMAT, "'paths' is not an array"},
        {"[1,2]", KC_ERR_FORMAT, "not a JSON object"},
        {"{\"modelTopology\": {", KC_ERR_FORMAT, "not valid JSON"},
        {"", KC_ERR_FORMAT, "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        loaded r = load_mem(cases[i].json, "", 0);
        assert_load_fails(&r, cases[i].status, cases[i].message);
    }

    /* A weightless model: no manifest at all; keras_version from
     * generatedBy without the converter's "keras v" prefix. */
    loaded r = load_mem("{\"generatedBy\":\"keras v2.9.0\",\"modelTopology\":{\"model_config\":"
                        "{\"class_name\":\"Functional\",\"config\":{}}}}",
                        "", 0);
    assert_int_equal(r.status, KC_OK);
    assert_string_equal(r.version, "2.9.0");
    assert_int_equal(r.arrays.n, 0);
    loaded_free(&r);

    r = load_mem("{\"modelTopology\":{\"class_name\":\"Sequential\"},\"weightsManifest\":[]}", "", 0);
    assert_int_equal(r.status, KC_OK);
    assert_string_equal(r.version, "unknown");
    loaded_free(&r);
}

static void test_quantized_values(void **state)
{
    (void)state;
    /* JS rounds Math.round(-2.5) to -2 (half up) and wraps out-of-range
     * values when storing into an Int32Array. */
    static const char bytes[] = {0, 1, 2, (char)255, 0x00, (char)0x80};
    loaded r = load_mem_weights(
        "[{\"name\":\"i\",\"shape\":[4],\"dtype\":\"int32\",\"quantization\":"
        "{\"dtype\":\"uint8\",\"min\":-2.5,\"scale\":1e9}},"
        "{\"name\":\"u\",\"shape\":[1],\"dtype\":\"float32\",\"quantization\":"
        "{\"dtype\":\"uint16\",\"min\":-1,\"scale\":0.0001}}]",
        bytes, sizeof bytes);
    assert_int_equal(r.status, KC_OK);
    /* q=0: round(-2.5) = -2; q=1: 999999997.5 -> 999999998;
     * q=2: 1999999997.5 -> 1999999998; q=255: 254999999997.5 -> wrapped. */
    double wrapped = fmod(254999999998.0, 4294967296.0);
    if (wrapped >= 2147483648.0)
        wrapped -= 4294967296.0;
    assert_values(&r.arrays.items[0],
                  (const float[]){-2.0f, 999999998.0f, 1999999998.0f, (float)wrapped}, 4);
    /* 32768 * 0.0001 - 1 computed in double, rounded to float once. */
    double x = 32768 * 0.0001;
    x = x - 1;
    assert_values(&r.arrays.items[1], (const float[]){(float)x}, 1);
    loaded_free(&r);
}

/* ----------------------------------------------------- wrapped models */

static void test_wrapped_model_files(void **state)
{
    char *dir = *state;
    /* Same shape as nsfwjs: model.min.js + group1-shard1of1.min.js, the
     * manifest naming the shard without its extension. */
    write_text(dir, "model.min.js",
               "!function(e){module.exports=e()}(function(){return function e(a,n,i){}({1:["
               "function(e,a,n){a.exports={format:\"layers-model\",modelTopology:{keras_version:"
               "\"2.2.4\",model_config:{class_name:\"Model\",config:{name:\"m\",layers:[]}}},"
               "weightsManifest:[{paths:[\"group1-shard1of1\"],weights:[{name:\"w\",shape:[2],"
               "dtype:\"float32\",quantization:{min:-.5,scale:.25,dtype:\"uint8\"}},{name:\"h\","
               "shape:[],dtype:\"float32\",quantization:{dtype:\"float16\"}}]}]}},{}]},{},[1])(1)});");
    /* bytes 02 06 | 00 3c: w = [0, 1], h = 1.0 */
    write_text(dir, "group1-shard1of1.min.js",
               "!function(e){module.exports=e()}(function(){return function e(h,n,d){}({1:["
               "function(e,h,n){h.exports=\"AgYAPA==\"},{}]},{},[1])(1)});");
    static const char *const names[] = {"model.min.js", "model"};
    for (size_t i = 0; i < 2; i++) {
        loaded r = load_in(dir, names[i]);
        if (r.status != KC_OK)
            print_error("%s\n", kc_last_error());
        assert_int_equal(r.status, KC_OK);
        assert_string_equal(r.version, "2.2.4");
        assert_int_equal(r.arrays.n, 2);
        assert_values(find_array(&r.arrays, "w"), (const float[]){0.0f, 1.0f}, 2);
        assert_values(find_array(&r.arrays, "h"), (const float[]){1.0f}, 1);
        loaded_free(&r);
    }
}

/* -------------------------------------------------------------- nsfwjs */

static int have_nsfwjs(void)
{
    struct stat st;
    return stat(KC_NSFWJS_DIR "/mobilenet_v2/model.min.js", &st) == 0;
}

static void check_nsfwjs_model(const char *model, int n_weights, const char *weight,
                               const int64_t *dims, const float *tfjs_values, int n_values)
{
    if (!have_nsfwjs()) {
        print_message("nsfwjs not installed under %s: run npm install in tools/\n", KC_NSFWJS_DIR);
        skip();
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/model.min.js", KC_NSFWJS_DIR, model);
    loaded r = load_path(path);
    if (r.status != KC_OK)
        print_error("%s\n", kc_last_error());
    assert_int_equal(r.status, KC_OK);
    assert_string_equal(r.version, "2.2.4");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(r.config, "class_name")->valuestring,
                        "Model");
    assert_non_null(cJSON_GetObjectItemCaseSensitive(r.config, "config"));
    assert_int_equal(r.arrays.n, n_weights);
    const kc_named_array *a = find_array(&r.arrays, weight);
    assert_non_null(a);
    assert_shape(a, 4, dims);
    assert_int_equal(a->stored_dtype, KC_U8);
    assert_int_equal(a->stored_bytes, dims[0] * dims[1] * dims[2] * dims[3]);
    /* Values printed by tools/tfjs_dequant_check.js, i.e. by tfjs itself. */
    assert_values(a, tfjs_values, n_values);
    loaded_free(&r);
}

static void test_nsfwjs_mobilenet_v2(void **state)
{
    (void)state;
    /* node tools/tfjs_dequant_check.js .../mobilenet_v2 Conv1/kernel 8 */
    static const float values[] = {-0.220002964f, -0.433339179f, 0.0666675642f, 0.0f,
                                   0.486673236f,  -0.173335671f, 0.0466672964f, 0.0f};
    check_nsfwjs_model("mobilenet_v2", 266, "Conv1/kernel", (const int64_t[]){3, 3, 3, 32},
                       values, 8);
}

static void test_nsfwjs_inception_v3(void **state)
{
    (void)state;
    /* node tools/tfjs_dequant_check.js .../inception_v3 conv2d_1/kernel 6 */
    static const float values[] = {-0.475345552f, -0.0449651219f, -0.0128471768f,
                                   -0.0770830661f, -0.0256943535f, 0.0385415331f};
    check_nsfwjs_model("inception_v3", 382, "conv2d_1/kernel", (const int64_t[]){3, 3, 3, 32},
                       values, 6);
}

static void test_nsfwjs_graph_model_refused(void **state)
{
    (void)state;
    if (!have_nsfwjs())
        skip();
    loaded r = load_path(KC_NSFWJS_DIR "/mobilenet_v2_mid/model.min.js");
    assert_load_fails(&r, KC_ERR_UNSUPPORTED, "a TensorFlow graph model, not a Keras layers model");
    assert_non_null(strstr(kc_last_error(), "mobilenet_v2_mid/model.min.js: "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_unwrap_object_all_tokens),
        cmocka_unit_test(test_unwrap_spacing_and_control_bytes),
        cmocka_unit_test(test_unwrap_base64),
        cmocka_unit_test(test_unwrap_rejects_code),
        cmocka_unit_test(test_unwrap_depth_limit),
        cmocka_unit_test_setup_teardown(test_read_file_errors, make_tmp, remove_tmp),
        cmocka_unit_test(test_fixture_model),
        cmocka_unit_test(test_append_to_list),
        cmocka_unit_test_setup_teardown(test_size_mismatch, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_path_escapes_refused, make_tmp, remove_tmp),
        cmocka_unit_test(test_bad_manifests),
        cmocka_unit_test(test_bad_documents),
        cmocka_unit_test(test_quantized_values),
        cmocka_unit_test_setup_teardown(test_wrapped_model_files, make_tmp, remove_tmp),
        cmocka_unit_test(test_nsfwjs_mobilenet_v2),
        cmocka_unit_test(test_nsfwjs_inception_v3),
        cmocka_unit_test(test_nsfwjs_graph_model_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
