#include <munge.h>
