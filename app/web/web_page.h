// What the browser build's page and the app say to each other (app/web/shell.html): the page's
// file picker (its "Open file" button, File > Open, Ctrl+O) writes the picked file into the
// module's file system and asks the shell to open it; a file the app wrote (a screenshot, a
// recording, a metrics CSV) is handed to the browser as a download.
#pragma once

#include <string>

namespace kvscope::ui {

class UiShell;

// The shell the page's requests go to (null: none yet).
void web_set_shell(UiShell* shell);
// Stops the page's frames and shows `what` over the canvas and in the tab's title (an exception
// escaped a frame: a bug, said rather than a frozen page).
void web_report_failure(const std::string& what);
// Stops the page's frames and shows `why` the app cannot start (the first run failed).
void web_fail(const std::string& why);
// The line over the page before the app's first frame ("" hides it).
void web_status(const std::string& text);
// Offers the file at `path` (in the module's file system) to the user as a download.
void web_offer_download(const std::string& path);
// Where a file to be downloaded as `name` is written first (a folder of the module's file
// system, created when missing).
std::string web_download_path(const std::string& name);
// Opens the browser's file picker (File > Open, Ctrl+O): the picked file reaches the shell as
// the page's "Open file…" button's does. A browser shows the picker only shortly after a click
// or a key press, which is when the menu and the shortcut call this.
void web_pick_file();

}  // namespace kvscope::ui
