/*
 * reflector_fixture.h - a reflector over a scripted transport (scripted_transport.h) feeding a
 * DeltaFIFO, for the C tests that play list and watch bodies to it: no server, no threads.
 * Header-only: each test file gets its own copy of these static functions.
 */
#ifndef KINF_TEST_REFLECTOR_FIXTURE_H
#define KINF_TEST_REFLECTOR_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "reflector.h"
#include "scripted_transport.h"

#define PATH "/api/v1/namespaces/t/pods"

typedef struct fx {
    scripted *sc;
    kinf_fifo *fifo;
    kinf_reflector *r;
} fx;

static inline fx fx_new_cfg(kinf_reflector_config *rc)
{
    kinf_err err;
    char msg[256];
    kinf_transport tr;
    fx f;
    f.sc = calloc(1, sizeof(*f.sc));
    f.sc->clock = 1000;
    tr = sc_transport(f.sc);
    f.fifo = kinf_fifo_new(NULL, KINF_FIFO_EMIT_REPLACED, &err);
    f.r = kinf_reflector_new(&tr, f.fifo, rc, &err, msg, sizeof msg);
    CHECK(f.r != NULL);
    CHECK(f.sc->refs == 1);
    CHECK(kinf_reflector_start(f.r) == KINF_OK);
    return f;
}

static inline void fx_free(fx *f)
{
    kinf_reflector_free(f->r);
    CHECK(f->sc->refs == 0 && f->sc->cur == NULL);
    kinf_fifo_unref(f->fifo);
    free(f->sc);
}

/* Plays one 200 response; bytewise: one byte per write; end: whether the transfer then ends. */
static inline void fx_respond(fx *f, const char *body, size_t len, int bytewise, int end)
{
    sc_response(f->sc, 200, 0);
    if (!bytewise) {
        (void)sc_body(f->sc, body, len);
    } else {
        for (size_t i = 0; i < len; i++)
            if (sc_body(f->sc, body + i, 1) == 0)
                break; /* aborted, as libcurl would */
    }
    if (end)
        sc_end(f->sc, KINF_XFER_OK, "", 5.0);
}

/* The newest delta of key: its type and the object's resourceVersion ("-" when not queued). */
static inline const char *newest(fx *f, const char *key, kinf_delta_type *type)
{
    static char rv[64];
    kinf_deltas d;
    if (kinf_fifo_get_by_key(f->fifo, key, strlen(key), &d) != KINF_OK)
        return "-";
    *type = d.v[d.n - 1].type;
    snprintf(rv, sizeof rv, "%s", d.v[d.n - 1].obj->resource_version);
    kinf_deltas_clear(&d);
    return rv;
}

#endif
