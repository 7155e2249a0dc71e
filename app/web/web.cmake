# kvscope-ui for the browser (scripts/web.sh, docs/web.md), included by app/CMakeLists.txt in an
# Emscripten build. Dear ImGui is compiled from KVSCOPE_IMGUI_SOURCE (Debian's imgui 1.86 source
# package: the version the desktop build links), GLFW is Emscripten's own (-sUSE_GLFW=3) and
# ImGui's OpenGL3 backend draws with WebGL 2. The page packages the scenarios, stories260K and
# its tokenizer, the shipped quality sweeps and a font into one .data file, at the paths the
# engine looks in (KVSCOPE_SOURCE_DIR is /kvscope, so ../shared is /shared).
set(KVSCOPE_IMGUI_SOURCE "" CACHE PATH "Dear ImGui's source tree (scripts/web.sh fetches it)")
set(KVSCOPE_WEB_MODELS "" CACHE PATH "The folder with stories260K.bin and tok512.bin")
set(KVSCOPE_WEB_TRACES "" CACHE PATH "The folder with mooncake/ (\"\": the page has no trace)")
set(KVSCOPE_WEB_FONT "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf" CACHE FILEPATH
    "The UI font packaged into the page (Debian's fonts-dejavu-core)")
foreach(need imgui.cpp backends/imgui_impl_glfw.cpp backends/imgui_impl_opengl3.cpp)
  if(NOT EXISTS "${KVSCOPE_IMGUI_SOURCE}/${need}")
    message(FATAL_ERROR "KVSCOPE_IMGUI_SOURCE: expected Dear ImGui's source tree with ${need}, "
                        "got '${KVSCOPE_IMGUI_SOURCE}' (scripts/web.sh fetches it)")
  endif()
endforeach()
foreach(need ${KVSCOPE_WEB_MODELS}/stories260K.bin ${KVSCOPE_WEB_MODELS}/tok512.bin
             ${KVSCOPE_WEB_FONT})
  if(NOT EXISTS "${need}")
    message(FATAL_ERROR "the browser build packages ${need}, which does not exist "
                        "(KVSCOPE_WEB_MODELS / KVSCOPE_WEB_FONT)")
  endif()
endforeach()

set(imgui ${KVSCOPE_IMGUI_SOURCE})
add_library(kvscope_imgui STATIC ${imgui}/imgui.cpp ${imgui}/imgui_draw.cpp
  ${imgui}/imgui_tables.cpp ${imgui}/imgui_widgets.cpp ${imgui}/backends/imgui_impl_glfw.cpp
  ${imgui}/backends/imgui_impl_opengl3.cpp ${CMAKE_CURRENT_SOURCE_DIR}/web/stb_image_write.c)
target_include_directories(kvscope_imgui SYSTEM PUBLIC ${imgui} ${KVSCOPE_WEB_INCLUDE}/stb)
target_compile_definitions(kvscope_imgui PUBLIC IMGUI_IMPL_OPENGL_ES3)

kvscope_add_ui_core()

set(KVSCOPE_WEB_OUT ${PROJECT_BINARY_DIR}/page CACHE PATH "Where the page is written")
add_executable(kvscope-ui main.cpp app.cpp renderer.cpp screenshot.cpp web/web_page.cpp)
target_link_libraries(kvscope-ui PRIVATE kvscope_ui_core)
kvscope_warnings(kvscope-ui)
# EM_ASM's JavaScript names its arguments $0, $1, ...
set_source_files_properties(web/web_page.cpp PROPERTIES
                            COMPILE_OPTIONS -Wno-dollar-in-identifier-extension)
set_target_properties(kvscope-ui PROPERTIES OUTPUT_NAME index SUFFIX .html
                      RUNTIME_OUTPUT_DIRECTORY ${KVSCOPE_WEB_OUT})
# "SHELL:" keeps each --preload-file with its path (CMake folds repeated options otherwise).
set(preload
  "SHELL:--preload-file ${PROJECT_SOURCE_DIR}/scenarios@/kvscope/scenarios"
  "SHELL:--preload-file ${PROJECT_SOURCE_DIR}/assets/text@/kvscope/assets/text"
  "SHELL:--preload-file ${PROJECT_SOURCE_DIR}/assets/quality@/kvscope/assets/quality"
  "SHELL:--preload-file ${KVSCOPE_WEB_MODELS}/stories260K.bin@/shared/models/stories260K.bin"
  "SHELL:--preload-file ${KVSCOPE_WEB_MODELS}/tok512.bin@/shared/models/tok512.bin"
  "SHELL:--preload-file ${KVSCOPE_WEB_FONT}@${KVSCOPE_WEB_FONT}")
if(KVSCOPE_WEB_TRACES)
  set(trace mooncake/conversation_trace.jsonl)
  list(APPEND preload "SHELL:--preload-file ${KVSCOPE_WEB_TRACES}/${trace}@/shared/traces/${trace}")
endif()
target_link_options(kvscope-ui PRIVATE
  -sUSE_GLFW=3 -sMIN_WEBGL_VERSION=2 -sMAX_WEBGL_VERSION=2
  -sALLOW_MEMORY_GROWTH=1 -sINITIAL_MEMORY=128MB -sMAXIMUM_MEMORY=4GB
  -sPTHREAD_POOL_SIZE=8 -sTOTAL_STACK=4MB -sDEFAULT_PTHREAD_STACK_SIZE=4MB
  -sFORCE_FILESYSTEM=1 -sMINIFY_HTML=0 "-sEXPORTED_RUNTIME_METHODS=['FS','ccall','addRunDependency','removeRunDependency']"
  "-sEXPORTED_FUNCTIONS=['_main','_kvscope_web_open','_kvscope_web_model_added']"
  "SHELL:--shell-file ${CMAKE_CURRENT_SOURCE_DIR}/web/shell.html" ${preload})
set_property(TARGET kvscope-ui APPEND PROPERTY LINK_DEPENDS
             ${CMAKE_CURRENT_SOURCE_DIR}/web/shell.html)
# The service worker that isolates the page where the server does not (web/isolate.js).
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/web/isolate.js ${KVSCOPE_WEB_OUT}/isolate.js COPYONLY)
