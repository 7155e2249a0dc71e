/* stb_image_write's implementation for the browser build (the desktop build links Debian's
   libstb, which holds it): PNG screenshots. */
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
