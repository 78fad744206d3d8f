/* Plots and the JSON numbers of the run report and the experiments: line
 * plots with stage bands as self-contained SVG (svg.c), the memory curve of
 * a profiled step (memory_curve.c), and doubles as JSON (plot_json.c).
 * Needs only the library: the run report (report.c) includes this,
 * not experiment.h; the experiments get it through experiment.h. */
#ifndef CHAM_PLOT_H
#define CHAM_PLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "chameleon/chameleon.h"

/* ---- JSON --------------------------------------------------------------------*/

struct json_t;
/* v as a JSON number, or null when it is NaN or infinite (JSON has neither,
 * and jansson's json_real refuses them): the one way the command (tools/)
 * and the experiments put a double into JSON. */
struct json_t *plot_json_number(double v);

/* ---- plots -------------------------------------------------------------------*/

#define PLOT_MAX_SERIES 8
/* The most ticks an axis gets. */
#define PLOT_MAX_TICKS 16
#define PLOT_MAX_CATEGORIES PLOT_MAX_TICKS   /* a tick each */

typedef struct plot_series {
    char name[40];
    size_t n;
    double *x, *y;               /* NAN y: a gap */
} plot_series_t;

#define PLOT_MAX_BANDS 128

/* A shaded x range behind the lines (a stage of a run, say). */
typedef struct plot_band {
    double x0, x1;
    char label[24];              /* bands of one label share a colour */
} plot_band_t;


typedef struct plot {
    char name[48];               /* file stem: NAME.svg */
    char title[160];
    char x_label[64], y_label[64];
    bool log_x;
    bool y_from_zero;            /* the y axis starts at 0 whatever the data (bytes) */
    bool scatter;                /* markers only: points that are not a series in x */
    size_t n_series;
    plot_series_t series[PLOT_MAX_SERIES];
    size_t n_bands;
    plot_band_t bands[PLOT_MAX_BANDS];
    /* With categories, x k + 1 is the k-th category: the x axis names
     * them, and each series is markers, not a line (nothing lies between
     * two categories). */
    size_t n_categories;
    char categories[PLOT_MAX_CATEGORIES][24];
} plot_t;

void plot_init(plot_t *p, const char *name, const char *title, const char *x_label,
                   const char *y_label);
/* Adds a point to the named series (made on first use); false when the
 * host is out of memory or there are too many series. */
bool plot_add(plot_t *p, const char *series, double x, double y);
void plot_free(plot_t *p);
/* A self-contained SVG line plot: axes with ticks, one coloured line with
 * markers per series, a legend. false, with errno saying why, when the
 * file cannot be written; the file is complete or not there
 * (cham_out_open, src/common/file.h). */
bool plot_write_svg(const plot_t *p, const char *path);
/* The same SVG into an open stream (to inline it in HTML). */
void plot_print_svg(const plot_t *p, FILE *f);
/* Adds the next category of the x axis (plot_t); its x is how many there
 * were before, plus 1. false when there is no room. */
bool plot_category(plot_t *p, const char *label);
/* Adds a band, or widens the last one when it has the same label and
 * touches x0; false when there is no room. */
bool plot_band(plot_t *p, const char *label, double x0, double x1);

/* The ticks of a plot's linear axis over data from lo to hi (from_zero: it
 * starts at 0 when lo is near it), as the plots draw them: 1, 2 or 5 times
 * a power of ten apart, increasing, 2 to PLOT_MAX_TICKS of them; returns how
 * many. Any lo and hi work: NaN, infinite, equal, an ulp apart, +-DBL_MAX. */
size_t plot_axis_ticks(double lo, double hi, bool from_zero, double ticks[PLOT_MAX_TICKS]);

/* s as one CSV field (RFC 4180): quoted, its quotes doubled, when it holds
 * a comma, a quote or a line break (op names and labels are the caller's). */
void plot_csv_field(FILE *f, const char *s);

/* The memory curve of one profiled step (paper Fig. 3): device memory in
 * use before and after each op, as measured and as it would have been
 * without the swaps, and the limit (the device's capacity, or a budget:
 * limit_name labels its line; the CSV's column stays capacity_bytes), as
 * NAME.svg and NAME.csv in dir. false with err when a file cannot be
 * written. */
bool plot_memory_curve(const cham_profile_t *p, uint64_t capacity, const char *limit_name,
                      const char *dir, const char *name, char *err, size_t err_size);

#endif
