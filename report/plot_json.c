/* Doubles as JSON numbers (plot.h): the one way the command (tools/) and
 * the experiments put a double into JSON. */
#include <math.h>

#include <jansson.h>

#include "plot.h"

json_t *plot_json_number(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}
