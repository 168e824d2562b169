// Precompiled header for the library: the heavy, stable headers most files need.
#pragma once
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
