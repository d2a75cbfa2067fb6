this is not a header
#define SOMETHING 1
