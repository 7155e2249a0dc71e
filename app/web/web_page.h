// What the browser build's page and the app say to each other (app/web/shell.html): the page's
// "Open file" button writes the picked file into the module's file system and asks the shell to
// open it; a screenshot the app wrote is handed to the browser as a download.
#pragma once

#include <string>

namespace kvscope::ui {

class UiShell;

// The shell the page's requests go to (null: none yet).
void web_set_shell(UiShell* shell);
// Stops the page's frames and shows `what` over the canvas and in the tab's title (an exception
// escaped a frame: a bug, said rather than a frozen page).
void web_report_failure(const std::string& what);
// Offers the file at `path` (in the module's file system) to the user as a download.
void web_offer_download(const std::string& path);

}  // namespace kvscope::ui
