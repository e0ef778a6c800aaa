/* The AMX kernel over a software model of the tile instructions: the same
 * source, for the tests on machines without AMX (BRGEMM_AMX=model). */
#define BRGEMM_AMX_MODEL 1
#include "brgemm_amx.c"
