/* Line plots as self-contained SVG (plot.h): axes with "nice" ticks,
 * light grid lines, one coloured polyline with markers per series, NAN
 * values as gaps, a legend. No external program is needed to view them. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "common/file.h"

/* Copies s into dst, cut at a character boundary: a UTF-8 sequence cut in
 * half would make the SVG ill-formed. */
static void copy_text(char *dst, size_t size, const char *s)
{
    size_t n = strlen(s);
    if (n >= size) {
        n = size - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, s, n);
    dst[n] = '\0';
}

void plot_init(plot_t *p, const char *name, const char *title, const char *x_label,
                   const char *y_label)
{
    memset(p, 0, sizeof *p);
    copy_text(p->name, sizeof p->name, name);
    copy_text(p->title, sizeof p->title, title);
    copy_text(p->x_label, sizeof p->x_label, x_label);
    copy_text(p->y_label, sizeof p->y_label, y_label);
}

bool plot_category(plot_t *p, const char *label)
{
    if (p->n_categories == PLOT_MAX_CATEGORIES)
        return false;
    copy_text(p->categories[p->n_categories], sizeof p->categories[0], label);
    p->n_categories++;
    return true;
}

bool plot_add(plot_t *p, const char *series, double x, double y)
{
    char name[sizeof p->series[0].name];  /* compared as it is stored */
    copy_text(name, sizeof name, series);
    plot_series_t *s = NULL;
    for (size_t i = 0; i < p->n_series && !s; i++)
        if (strcmp(p->series[i].name, name) == 0)
            s = &p->series[i];
    if (!s) {
        if (p->n_series == PLOT_MAX_SERIES)
            return false;
        s = &p->series[p->n_series++];
        *s = (plot_series_t){0};
        memcpy(s->name, name, sizeof name);
    }
    if ((s->n & (s->n - 1)) == 0) {          /* 0, 1, 2, 4, ...: double the room */
        size_t cap = s->n ? 2 * s->n : 1;
        double *x2 = realloc(s->x, cap * sizeof *x2);
        if (!x2)
            return false;
        s->x = x2;
        double *y2 = realloc(s->y, cap * sizeof *y2);
        if (!y2)
            return false;
        s->y = y2;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return true;
}

bool plot_band(plot_t *p, const char *label, double x0, double x1)
{
    char name[sizeof p->bands[0].label];
    copy_text(name, sizeof name, label);
    plot_band_t *last = p->n_bands ? &p->bands[p->n_bands - 1] : NULL;
    if (last && strcmp(last->label, name) == 0 && last->x1 >= x0) {
        last->x1 = x1 > last->x1 ? x1 : last->x1;
        return true;
    }
    if (p->n_bands == PLOT_MAX_BANDS)
        return false;
    plot_band_t *b = &p->bands[p->n_bands++];
    *b = (plot_band_t){.x0 = x0, .x1 = x1};
    copy_text(b->label, sizeof b->label, label);
    return true;
}

void plot_free(plot_t *p)
{
    for (size_t i = 0; i < p->n_series; i++) {
        free(p->series[i].x);
        free(p->series[i].y);
        p->series[i] = (plot_series_t){0};
    }
    p->n_series = 0;
    p->n_bands = 0;
}

/* ---- layout -------------------------------------------------------------------------*/

#define WIDTH 720
#define HEIGHT 420
#define LEFT 78
#define RIGHT 170                /* room for the legend */
#define TOP 44
#define BOTTOM 56

/* Okabe-Ito: told apart with every common colour-vision deficiency. */
static const char *const palette[PLOT_MAX_SERIES] = {
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
};

typedef struct axis {
    double lo, hi;               /* the drawn range */
    double step;                 /* linear: between ticks */
    bool log;
    size_t n;                    /* ticks: increasing, within [lo, hi] */
    double tick[PLOT_MAX_TICKS];
} axis_t;

/* Linear: ticks k * step, step 1, 2 or 5 times a power of ten near a sixth
 * of the range, which makes 5 to 12 of them. Any lo and hi are handled:
 * non-finite or reversed ones as 0..1, one value (or values closer than a
 * billionth of their size, which the labels could not tell apart, and which
 * used to give a step under one ulp and a loop without end) padded around
 * their middle, and ranges up to +-DBL_MAX without overflow: differences
 * are taken of halves, and ends that overflow stay at the data's. */
static void linear_axis(axis_t *a, double lo, double hi, bool from_zero)
{
    memset(a, 0, sizeof *a);
    if (!(isfinite(lo) && isfinite(hi) && lo <= hi))
        lo = 0, hi = 1;
    if (fmax(fabs(lo), fabs(hi)) < 1e-300)   /* denormals and zeros: 0 */
        lo = hi = 0;
    if (from_zero && lo >= 0 && lo < 0.4 * hi)
        lo = 0;
    double mag = fmax(fabs(lo), fabs(hi));
    if (!(hi / 2 - lo / 2 > mag * 1e-9)) {   /* one value: pad around it */
        double mid = lo / 2 + hi / 2, pad = mid != 0 ? fabs(mid) * 0.5 : 1;
        lo = fmax(mid - pad, -DBL_MAX);
        hi = fmin(mid + pad, DBL_MAX);
        if (from_zero && lo < 0 && hi - pad >= 0)
            lo = 0;
    }
    double raw = (hi / 2 - lo / 2) / 3;      /* a sixth of the range */
    double p = pow(10, floor(log10(raw))), m = raw / p;
    double step = p * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
    double k0 = floor(lo / step), k1 = ceil(hi / step);
    a->lo = isfinite(k0 * step) ? k0 * step : lo;
    a->hi = isfinite(k1 * step) ? k1 * step : hi;
    a->step = step;
    for (double k = k0; k <= k1 && a->n < PLOT_MAX_TICKS; k++) {
        double v = k * step;
        if (isfinite(v) && v >= a->lo && v <= a->hi)
            a->tick[a->n++] = v;
    }
}

size_t plot_axis_ticks(double lo, double hi, bool from_zero, double ticks[PLOT_MAX_TICKS])
{
    axis_t a;
    linear_axis(&a, lo, hi, from_zero);
    memcpy(ticks, a.tick, a.n * sizeof *ticks);
    return a.n;
}

/* Powers of two when every value is one, else decades; a tick every
 * stride powers so that there are at most PLOT_MAX_TICKS. Exponents stay
 * where the powers are finite and non-zero. */
static void log_axis(axis_t *a, double lo, double hi, bool pow2)
{
    memset(a, 0, sizeof *a);
    double base = pow2 ? 2 : 10, e_min = pow2 ? -1074 : -323, e_max = pow2 ? 1023 : 308;
    if (!(isfinite(lo) && isfinite(hi) && lo > 0 && lo <= hi))
        lo = 1, hi = base;
    double e0 = fmax(e_min, floor(pow2 ? log2(lo) : log10(lo)));
    double e1 = fmin(e_max, ceil(pow2 ? log2(hi) : log10(hi)));
    if (e0 >= e_max)
        e0 = e_max - 1;
    if (e1 <= e0)
        e1 = e0 + 1;
    double stride = ceil((e1 - e0) / (PLOT_MAX_TICKS - 1));
    e1 = fmin(e_max, e0 + stride * ceil((e1 - e0) / stride));
    a->lo = pow(base, e0);
    a->hi = pow(base, e1);
    a->step = pow(base, stride);
    a->log = true;
    for (double e = e0; e <= e1 && a->n < PLOT_MAX_TICKS; e += stride)
        a->tick[a->n++] = pow(base, e);
}

/* Where v falls on the axis, 0 at lo and 1 at hi (halves: no overflow). */
/* Categories: a tick at each of 1..n, half a category of room each side. */
static void category_axis(axis_t *a, size_t n)
{
    memset(a, 0, sizeof *a);
    a->lo = 0.5, a->hi = (double)n + 0.5, a->step = 1;
    for (size_t k = 0; k < n; k++)
        a->tick[a->n++] = (double)k + 1;
}

static double to_unit(const axis_t *a, double v)
{
    return a->log ? (log(v) - log(a->lo)) / (log(a->hi) - log(a->lo))
                  : (v / 2 - a->lo / 2) / (a->hi / 2 - a->lo / 2);
}

/* A tick label: up to 4 significant digits, k/M/G from 10,000. */
static void label(char *buf, size_t size, double v)
{
    const char *suffix = "";
    double a = fabs(v);
    if (a >= 1e10) {
        v /= 1e9;
        suffix = "G";
    } else if (a >= 1e7) {
        v /= 1e6;
        suffix = "M";
    } else if (a >= 1e4) {
        v /= 1e3;
        suffix = "k";
    }
    snprintf(buf, size, "%.4g%s", v, suffix);
}

static void escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

static bool usable(const plot_t *p, double x, double y)
{
    return isfinite(x) && isfinite(y) && (!p->log_x || x > 0);
}

/* ---- drawing -------------------------------------------------------------------------*/

static void draw_axes(FILE *f, const plot_t *p, const axis_t *ax, const axis_t *ay)
{
    const double w = WIDTH - LEFT - RIGHT, h = HEIGHT - TOP - BOTTOM;
    char buf[32];
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
            "stroke=\"#444\" stroke-width=\"1\"/>\n", LEFT, TOP, w, h);
    /* y ticks and grid */
    for (size_t k = 0; k < ay->n; k++) {
        double v = ay->tick[k], y = TOP + h * (1 - to_unit(ay, v));
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#ddd\"/>\n",
                LEFT, y, LEFT + w, y);
        label(buf, sizeof buf, fabs(v) < ay->step * 1e-9 ? 0 : v);
        fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\" dominant-baseline=\"middle\">"
                "%s</text>\n", LEFT - 6, y, buf);
    }
    /* x ticks and grid */
    for (size_t k = 0; k < ax->n; k++) {
        double v = ax->tick[k], x = LEFT + w * to_unit(ax, v);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#ddd\"/>\n", x,
                TOP, x, TOP + h);
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">", x, TOP + h + 18);
        if (p->n_categories) {
            escaped(f, p->categories[k]);
        } else {
            label(buf, sizeof buf, fabs(v) < (ax->log ? 0 : ax->step * 1e-9) ? 0 : v);
            fputs(buf, f);
        }
        fputs("</text>\n", f);
    }
    /* A title wider than the plot at 15 px is set smaller (about 0.55 em
     * a character) rather than cut at the edges. */
    double title_px = fmin(15, (WIDTH - 20) / (0.55 * (double)strlen(p->title)));
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"%.1f\" "
            "font-weight=\"bold\">", WIDTH / 2.0, TOP - 18, title_px);
    escaped(f, p->title);
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", LEFT + w / 2,
            HEIGHT - 12);
    escaped(f, p->x_label);
    fprintf(f, "</text>\n<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 18 %.1f)\">", TOP + h / 2, TOP + h / 2);
    escaped(f, p->y_label);
    fputs("</text>\n", f);
}

/* One series: a polyline per run of usable points, markers if few; a
 * scatter plot's markers only; over categories markers only, each series
 * a little to the side of the one before so that equal values stay apart. */
static void draw_series(FILE *f, const plot_t *p, size_t i, const axis_t *ax,
                        const axis_t *ay)
{
    const plot_series_t *s = &p->series[i];
    const double w = WIDTH - LEFT - RIGHT, h = HEIGHT - TOP - BOTTOM;
    if (p->n_categories || p->scatter) {
        double side = p->n_categories ? 8 * ((double)i - (double)(p->n_series - 1) / 2) : 0;
        for (size_t k = 0; k < s->n; k++)
            if (usable(p, s->x[k], s->y[k]))
                fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"4\" fill=\"%s\"/>\n",
                        LEFT + w * to_unit(ax, s->x[k]) + side,
                        TOP + h * (1 - to_unit(ay, s->y[k])), palette[i]);
        return;
    }
    bool open = false;
    for (size_t k = 0; k < s->n; k++) {
        if (!usable(p, s->x[k], s->y[k])) {
            if (open)
                fputs("\"/>\n", f);
            open = false;
            continue;
        }
        if (!open)
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
                    palette[i]);
        fprintf(f, "%s%.2f,%.2f", open ? " " : "", LEFT + w * to_unit(ax, s->x[k]),
                TOP + h * (1 - to_unit(ay, s->y[k])));
        open = true;
    }
    if (open)
        fputs("\"/>\n", f);
    if (s->n > 60)
        return;
    for (size_t k = 0; k < s->n; k++)
        if (usable(p, s->x[k], s->y[k]))
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n",
                    LEFT + w * to_unit(ax, s->x[k]), TOP + h * (1 - to_unit(ay, s->y[k])),
                    palette[i]);
}

/* Light fills for bands, by the order their labels first appear. */
static const char *const band_fill[] = {"#fde2c8", "#d6ead9", "#dbe4f3", "#efd9ea"};
#define N_BAND_FILLS (sizeof band_fill / sizeof band_fill[0])

/* The distinct band labels in order of appearance; the index of b's. */
static size_t band_kind(const plot_t *p, size_t b)
{
    size_t kind = 0;
    for (size_t i = 0; i < b; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(p->bands[j].label, p->bands[i].label) == 0;
        if (!seen && strcmp(p->bands[i].label, p->bands[b].label) == 0)
            return kind;
        kind += !seen;
    }
    return kind;
}

static void draw_bands(FILE *f, const plot_t *p, const axis_t *ax)
{
    const double w = WIDTH - LEFT - RIGHT, h = HEIGHT - TOP - BOTTOM;
    for (size_t b = 0; b < p->n_bands; b++) {
        if (!isfinite(p->bands[b].x0) || !isfinite(p->bands[b].x1))
            continue;
        double x0 = fmax(0, to_unit(ax, p->bands[b].x0)), x1 = fmin(1, to_unit(ax, p->bands[b].x1));
        if (!(x1 > x0))
            continue;
        fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"/>\n",
                LEFT + w * x0, TOP, w * (x1 - x0), h, band_fill[band_kind(p, b) % N_BAND_FILLS]);
    }
}

static void draw_legend(FILE *f, const plot_t *p)
{
    int x = WIDTH - RIGHT + 14, y = TOP + 10;
    for (size_t i = 0; i < p->n_series; i++, y += 20) {
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"4\" fill=\"%s\"/>\n", x, y,
                palette[i]);
        fprintf(f, "<text x=\"%d\" y=\"%d\" dominant-baseline=\"middle\">", x + 22, y + 2);
        escaped(f, p->series[i].name);
        fputs("</text>\n", f);
    }
    for (size_t b = 0; b < p->n_bands; b++) {
        bool seen = false;                /* one legend entry per label */
        for (size_t j = 0; j < b && !seen; j++)
            seen = strcmp(p->bands[j].label, p->bands[b].label) == 0;
        if (seen)
            continue;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"10\" fill=\"%s\" "
                "stroke=\"#999\" stroke-width=\"0.5\"/>\n", x, y - 3,
                band_fill[band_kind(p, b) % N_BAND_FILLS]);
        fprintf(f, "<text x=\"%d\" y=\"%d\" dominant-baseline=\"middle\">", x + 22, y + 2);
        escaped(f, p->bands[b].label);
        fputs("</text>\n", f);
        y += 20;
    }
}

void plot_print_svg(const plot_t *p, FILE *f)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    bool pow2 = true;
    for (size_t i = 0; i < p->n_series; i++)
        for (size_t k = 0; k < p->series[i].n; k++) {
            double x = p->series[i].x[k], y = p->series[i].y[k];
            if (!usable(p, x, y))
                continue;
            xlo = fmin(xlo, x), xhi = fmax(xhi, x), ylo = fmin(ylo, y), yhi = fmax(yhi, y);
            double e = log2(x);
            pow2 = pow2 && e == floor(e);
        }
    if (!(xlo <= xhi)) {                      /* nothing to draw: empty axes */
        xlo = p->log_x ? 1 : 0, xhi = p->log_x ? 10 : 1, ylo = 0, yhi = 1;
        pow2 = false;
    }
    axis_t ax, ay;
    if (p->n_categories)
        category_axis(&ax, p->n_categories);
    else if (p->log_x)
        log_axis(&ax, xlo, xhi, pow2);
    else
        linear_axis(&ax, xlo, xhi, false);
    linear_axis(&ay, p->y_from_zero ? fmin(ylo, 0) : ylo, p->y_from_zero ? fmax(yhi, 0) : yhi,
                true);

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
            "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\" "
            "font-size=\"12\" fill=\"#222\">\n<rect width=\"100%%\" height=\"100%%\" "
            "fill=\"white\"/>\n", WIDTH, HEIGHT, WIDTH, HEIGHT);
    draw_bands(f, p, &ax);
    draw_axes(f, p, &ax, &ay);
    for (size_t i = 0; i < p->n_series; i++)
        draw_series(f, p, i, &ax, &ay);
    draw_legend(f, p);
    fputs("</svg>\n", f);
}

bool plot_write_svg(const plot_t *p, const char *path)
{
    cham_out_t *o;
    if (cham_out_open(path, &o, NULL, 0) != CHAM_OK)
        return false;
    FILE *f = cham_out_file(o);
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    plot_print_svg(p, f);
    return cham_out_commit(o, NULL, 0) == CHAM_OK;   /* errno says why */
}
