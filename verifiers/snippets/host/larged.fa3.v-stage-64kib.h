#include <tuple>
